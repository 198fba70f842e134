"""Taints, tolerations and node affinity, validated as the API server validates them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workloads.manifests.fields import Fields, join, label_key_problem

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION_FIELDS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def taints(fields: Fields, parent: Mapping[str, Any], key: str, base: str) -> list[dict[str, str]]:
    result = []
    for path, taint in fields.mappings(parent, key, base, max_items=8):
        fields.known_keys(taint, frozenset({"key", "value", "effect", "timeAdded"}), path)
        name = fields.string(taint, "key", path)
        problem = label_key_problem(name, "taint key")
        if problem:
            raise fields.error(join(path, "key"), name, problem)
        value = fields.string(taint, "value", path, default="")
        fields.string(taint, "effect", path)
        effect = fields.choice(taint, "effect", path, EFFECTS, default="")
        result.append({"key": name, "value": value, "effect": effect})
    return result


def tolerations(
    fields: Fields, parent: Mapping[str, Any], key: str, base: str, *, max_items: int | None = None
) -> list[dict[str, Any]]:
    """Tolerations in Kubernetes spelling with only the fields given (ValidateTolerations)."""
    result = []
    for path, toleration in fields.mappings(parent, key, base, max_items=max_items):
        fields.known_keys(toleration, _TOLERATION_FIELDS, path)
        name = fields.string(toleration, "key", path, default="")
        operator = fields.choice(toleration, "operator", path, ("Equal", "Exists"), default="Equal")
        value = fields.string(toleration, "value", path, default="")
        effect = fields.string(toleration, "effect", path, default="")
        if effect:
            fields.choice(toleration, "effect", path, EFFECTS, default="")
        seconds = fields.optional_integer(
            toleration, "tolerationSeconds", path, minimum=None, maximum=2**63 - 1
        )
        if not name and operator != "Exists":
            raise fields.error(
                join(path, "operator"), operator, "operator must be Exists when key is empty"
            )
        if operator == "Exists" and value:
            raise fields.error(
                join(path, "value"), value, "value must be empty when operator is Exists"
            )
        if seconds is not None and effect != "NoExecute":
            raise fields.error(
                join(path, "effect"),
                effect,
                "effect must be NoExecute when tolerationSeconds is set",
            )
        result.append({k: toleration[k] for k in toleration if toleration[k] is not None})
    return result


def required_node_affinity(
    fields: Fields, pod_spec: Mapping[str, Any], base: str
) -> tuple[tuple[dict[str, Any], ...], ...]:
    """nodeSelectorTerms -> matchExpressions of requiredDuringSchedulingIgnoredDuringExecution."""
    path = join(base, "affinity")
    affinity = fields.mapping(pod_spec, "affinity", base)
    node = fields.mapping(affinity, "nodeAffinity", path)
    path = join(path, "nodeAffinity")
    required = fields.mapping(node, "requiredDuringSchedulingIgnoredDuringExecution", path)
    path = join(path, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = []
    for term_path, term in fields.mappings(required, "nodeSelectorTerms", path):
        expressions = []
        for expr_path, expression in fields.mappings(term, "matchExpressions", term_path):
            expressions.append(_node_requirement(fields, expression, expr_path))
        terms.append(tuple(expressions))
    return tuple(terms)


def _node_requirement(fields: Fields, expression: Mapping[str, Any], path: str) -> dict[str, Any]:
    key = fields.string(expression, "key", path)
    fields.string(expression, "operator", path)
    operator = fields.choice(expression, "operator", path, _NODE_OPERATORS, default="")
    values = fields.strings(expression, "values", path)
    needs_values = {
        "In": "one or more",
        "NotIn": "one or more",
        "Gt": "exactly one",
        "Lt": "exactly one",
    }.get(operator)
    count_ok = (
        (not values)
        if needs_values is None
        else (len(values) == 1 if needs_values == "exactly one" else bool(values))
    )
    if not count_ok:
        want = needs_values or "no"
        raise fields.error(join(path, "values"), values, f"operator {operator} needs {want} values")
    return {"key": key, "operator": operator, "values": list(values)}
