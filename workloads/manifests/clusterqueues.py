"""ClusterQueue and Cohort specs, from Kueue's v1beta1 or v1beta2 spelling to one normal form.

Defaults and rules follow the CRDs (`config/components/crd/bases`) and Kueue's webhooks
(`pkg/webhooks/clusterqueue_webhook.go`, `cohort_webhook.go`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workloads.manifests.fields import INT32_MAX, Fields, join, label_key_problem

_V1BETA1 = "kueue.x-k8s.io/v1beta1"
_COMMON = frozenset(
    {
        "admissionChecksStrategy",
        "admissionScope",
        "fairSharing",
        "flavorFungibility",
        "namespaceSelector",
        "preemption",
        "queueingStrategy",
        "resourceGroups",
        "stopPolicy",
    }
)
_CQ_FIELDS = {
    _V1BETA1: _COMMON | {"admissionChecks", "cohort"},
    "kueue.x-k8s.io/v1beta2": _COMMON | {"cohortName", "concurrentAdmissionPolicy"},
}
_COHORT_FIELDS = frozenset({"fairSharing", "parentName", "resourceGroups"})
_QUOTA_FIELDS = frozenset({"name", "nominalQuota", "borrowingLimit", "lendingLimit"})
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
STOP_POLICIES = ("None", "Hold", "HoldAndDrain")
_MAX_FLAVORS = 256


def cluster_queue_spec(fields: Fields, api_version: str, body: Mapping[str, Any]) -> dict[str, Any]:
    spec = fields.mapping(body, "spec", "")
    fields.known_keys(spec, _CQ_FIELDS[api_version], "spec")
    cohort_field = "cohort" if api_version == _V1BETA1 else "cohortName"
    cohort = fields.optional_string(spec, cohort_field, "spec") or None
    if cohort:
        fields.name(cohort, join("spec", cohort_field))
    return {
        "cohort": cohort,
        "queueing_strategy": fields.choice(
            spec,
            "queueingStrategy",
            "spec",
            ("BestEffortFIFO", "StrictFIFO"),
            default="BestEffortFIFO",
        ),
        # Kueue: a missing namespaceSelector selects no namespace; `{}` selects all of them.
        "namespace_selector": _namespace_selector(fields, spec),
        "preemption": _preemption(fields, spec),
        "flavor_fungibility": _flavor_fungibility(fields, spec, api_version == _V1BETA1),
        "resource_groups": resource_groups(
            fields, spec, missing_parent=None if cohort else cohort_field, check_lending=True
        ),
        "admission_checks": _admission_checks(fields, spec),
        "stop_policy": fields.choice(spec, "stopPolicy", "spec", STOP_POLICIES, default="None"),
    }


def cohort_spec(fields: Fields, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    spec = fields.mapping(body, "spec", "")
    fields.known_keys(spec, _COHORT_FIELDS, "spec")
    parent = fields.optional_string(spec, "parentName", "spec") or None
    if parent:
        fields.name(parent, "spec.parentName")
        if parent == name:
            raise fields.error("spec.parentName", parent, "a Cohort cannot be its own parent")
    return {
        "parent": parent,
        # Cohorts may lend more than their nominal quota (validationConfig in Kueue's webhooks).
        "resource_groups": resource_groups(
            fields, spec, missing_parent=None if parent else "parentName", check_lending=False
        ),
    }


def resource_groups(
    fields: Fields, spec: Mapping[str, Any], *, missing_parent: str | None, check_lending: bool
) -> list[dict[str, Any]]:
    """`missing_parent` names the empty cohort field when limits are forbidden, else None."""
    base = "spec.resourceGroups"
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    groups = []
    for path, group in fields.mappings(spec, "resourceGroups", "spec", max_items=16):
        fields.known_keys(group, frozenset({"coveredResources", "flavors"}), path)
        covered = fields.strings(group, "coveredResources", path, min_items=1, max_items=64)
        for i, resource in enumerate(covered):
            where = join(join(path, "coveredResources"), i)
            problem = label_key_problem(resource, "resource name")
            if problem or resource in seen_resources:
                raise fields.error(
                    where,
                    resource,
                    problem or f"{resource!r} is already covered by another resource group",
                )
            seen_resources.add(resource)
        flavors = []
        for fpath, flavor in fields.mappings(group, "flavors", path, min_items=1, max_items=64):
            quotas = _flavor_quotas(fields, flavor, fpath, covered, missing_parent, check_lending)
            if quotas["name"] in seen_flavors:
                raise fields.error(
                    join(fpath, "name"),
                    quotas["name"],
                    f"flavor {quotas['name']!r} appears in more than one place",
                )
            seen_flavors.add(quotas["name"])
            flavors.append(quotas)
        groups.append({"covered_resources": covered, "flavors": flavors})
    if len(seen_flavors) > _MAX_FLAVORS:
        raise fields.error(base, len(seen_flavors), f"at most {_MAX_FLAVORS} flavors in total")
    return groups


def _flavor_quotas(
    fields: Fields,
    flavor: Mapping[str, Any],
    path: str,
    covered: list[str],
    missing_parent: str | None,
    check_lending: bool,
) -> dict[str, Any]:
    fields.known_keys(flavor, frozenset({"name", "resources"}), path)
    name = fields.name(fields.string(flavor, "name", path), join(path, "name"))
    items = fields.mappings(flavor, "resources", path, min_items=1, max_items=64)
    names = [fields.string(item, "name", item_path) for item_path, item in items]
    if names != covered:
        raise fields.error(
            join(path, "resources"),
            names,
            f"lists {names}; each flavor must list exactly the group's coveredResources, "
            f"in the same order: {covered}",
        )
    resources = []
    for item_path, item in items:
        fields.known_keys(item, _QUOTA_FIELDS, item_path)
        nominal = item.get("nominalQuota")
        if nominal is None:
            raise fields.error(join(item_path, "nominalQuota"), None, "is required")
        quota = {
            "name": item["name"],
            "nominal_quota": fields.quantity(nominal, join(item_path, "nominalQuota")),
            "borrowing_limit": fields.optional_quantity(item, "borrowingLimit", item_path),
            "lending_limit": fields.optional_quantity(item, "lendingLimit", item_path),
        }
        _check_limits(fields, quota, item_path, missing_parent, check_lending)
        resources.append(quota)
    return {"name": name, "resources": resources}


def _check_limits(
    fields: Fields,
    quota: Mapping[str, Any],
    path: str,
    missing_parent: str | None,
    check_lending: bool,
) -> None:
    for key, limit in (("borrowingLimit", "borrowing_limit"), ("lendingLimit", "lending_limit")):
        if quota[limit] is not None and missing_parent:
            raise fields.error(
                join(path, key), quota[limit], f"{key} must be nil when {missing_parent} is empty"
            )
    lending = quota["lending_limit"]
    if check_lending and lending is not None and lending > quota["nominal_quota"]:
        raise fields.error(
            join(path, "lendingLimit"),
            lending,
            "lendingLimit must be less than or equal to nominalQuota",
        )


def _namespace_selector(fields: Fields, spec: Mapping[str, Any]) -> dict[str, Any] | None:
    base = "spec.namespaceSelector"
    selector = fields.optional_mapping(spec, "namespaceSelector", "spec")
    if selector is None:
        return None
    fields.known_keys(selector, frozenset({"matchLabels", "matchExpressions"}), base)
    fields.string_map(selector, "matchLabels", base)
    for path, expression in fields.mappings(selector, "matchExpressions", base):
        fields.known_keys(expression, frozenset({"key", "operator", "values"}), path)
        fields.string(expression, "key", path)
        fields.string(expression, "operator", path)
        operator = fields.choice(expression, "operator", path, _SELECTOR_OPERATORS, default="")
        values = fields.strings(expression, "values", path)
        if (operator in ("In", "NotIn")) != bool(values):
            raise fields.error(
                join(path, "values"),
                values,
                "must be non-empty exactly when the operator is In or NotIn",
            )
    return dict(selector)


def _preemption(fields: Fields, spec: Mapping[str, Any]) -> dict[str, Any]:
    base = "spec.preemption"
    preemption = fields.mapping(spec, "preemption", "spec")
    fields.known_keys(
        preemption,
        frozenset({"withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"}),
        base,
    )
    borrow_base = join(base, "borrowWithinCohort")
    borrow = fields.mapping(preemption, "borrowWithinCohort", base)
    fields.known_keys(borrow, frozenset({"policy", "maxPriorityThreshold"}), borrow_base)
    result = {
        "within_cluster_queue": fields.choice(
            preemption,
            "withinClusterQueue",
            base,
            ("Never", "LowerPriority", "LowerOrNewerEqualPriority"),
            default="Never",
        ),
        "reclaim_within_cohort": fields.choice(
            preemption,
            "reclaimWithinCohort",
            base,
            ("Never", "LowerPriority", "Any"),
            default="Never",
        ),
        "borrow_within_cohort": fields.choice(
            borrow, "policy", borrow_base, ("Never", "LowerPriority"), default="Never"
        ),
        "max_priority_threshold": fields.optional_integer(
            borrow, "maxPriorityThreshold", borrow_base, minimum=-INT32_MAX - 1
        ),
    }
    # CEL rule on ClusterQueuePreemption.
    if result["reclaim_within_cohort"] == "Never" and result["borrow_within_cohort"] != "Never":
        raise fields.error(
            join(borrow_base, "policy"),
            result["borrow_within_cohort"],
            "borrowWithinCohort.policy must be Never when reclaimWithinCohort is Never",
        )
    return result


def _flavor_fungibility(fields: Fields, spec: Mapping[str, Any], v1beta1: bool) -> dict[str, Any]:
    base = "spec.flavorFungibility"
    fungibility = fields.mapping(spec, "flavorFungibility", "spec")
    fields.known_keys(
        fungibility, frozenset({"whenCanBorrow", "whenCanPreempt", "preference"}), base
    )
    policies = ("MayStopSearch", "TryNextFlavor")
    # v1beta1 still accepts the deprecated names Borrow and Preempt for MayStopSearch.
    result = {
        "when_can_borrow": fields.choice(
            fungibility,
            "whenCanBorrow",
            base,
            policies,
            default="MayStopSearch",
            aliases={"Borrow": "MayStopSearch"} if v1beta1 else None,
        ),
        "when_can_preempt": fields.choice(
            fungibility,
            "whenCanPreempt",
            base,
            policies,
            default="TryNextFlavor",
            aliases={"Preempt": "MayStopSearch"} if v1beta1 else None,
        ),
        "preference": None,
    }
    if fungibility.get("preference") is not None:
        result["preference"] = fields.choice(
            fungibility,
            "preference",
            base,
            ("BorrowingOverPreemption", "PreemptionOverBorrowing"),
            default="",
        )
    both_try_next = result["when_can_borrow"] == result["when_can_preempt"] == "TryNextFlavor"
    if result["preference"] and not both_try_next:
        raise fields.error(
            join(base, "preference"),
            result["preference"],
            "preference can only be set when whenCanBorrow and whenCanPreempt are TryNextFlavor",
        )
    return result


def _admission_checks(fields: Fields, spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    base = "spec.admissionChecksStrategy"
    names = fields.strings(spec, "admissionChecks", "spec")
    strategy = fields.optional_mapping(spec, "admissionChecksStrategy", "spec")
    if strategy is None:
        return [{"name": name, "on_flavors": []} for name in names]
    if names:
        raise fields.error(
            "spec.admissionChecks",
            names,
            "admissionChecks and admissionChecksStrategy cannot both be set",
        )
    fields.known_keys(strategy, frozenset({"admissionChecks"}), base)
    checks: list[dict[str, Any]] = []
    for path, check in fields.mappings(
        strategy, "admissionChecks", base, min_items=1, max_items=64
    ):
        fields.known_keys(check, frozenset({"name", "onFlavors"}), path)
        name = fields.string(check, "name", path)
        if any(c["name"] == name for c in checks):
            raise fields.error(
                join(path, "name"), name, f"admission check {name!r} is listed twice"
            )
        on_flavors = fields.strings(check, "onFlavors", path, max_items=64)
        for i, flavor in enumerate(on_flavors):
            fields.name(flavor, join(join(path, "onFlavors"), i))
        checks.append({"name": name, "on_flavors": on_flavors})
    return checks
