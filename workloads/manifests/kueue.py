"""Queueing objects (Kueue kinds, PriorityClass): normal form in, storage-version manifest out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import scheduler as s
from workloads.manifests.clusterqueues import (
    STOP_POLICIES,
    ClusterQueueSpec,
    CohortSpec,
    cluster_queue_spec,
    cohort_spec,
    fair_weight,
)
from workloads.manifests.configuration import configuration_spec, render_configuration
from workloads.manifests.documents import Document
from workloads.manifests.fields import (
    INT32_MAX,
    Fields,
    join,
    label_key_problem,
    label_value_problem,
)
from workloads.manifests.scheduling import taints, tolerations
from workloads.quantities import format_quantity, format_weight

KUEUE_STORAGE_VERSION = "kueue.x-k8s.io/v1beta2"
HOSTNAME = "kubernetes.io/hostname"
# k8s HighestUserDefinablePriority; larger values are reserved for system- classes.
_MAX_USER_PRIORITY = 1_000_000_000
_OBJECT_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})


def queue_spec(doc: Document) -> dict[str, Any]:
    """The normal form of a queueing object (quantities in milli-units), with Kueue's defaults."""
    fields = Fields.of(doc)
    if doc.kind == "ClusterQueue":
        fields.known_keys(doc.body, _OBJECT_FIELDS, "")
        return cluster_queue_spec(fields, doc.api_version, doc.body)
    if doc.kind == "Cohort":
        fields.known_keys(doc.body, _OBJECT_FIELDS, "")
        return cohort_spec(fields, doc.name, doc.body)
    if doc.kind == "Configuration":
        return configuration_spec(fields, doc.api_version, doc.body)
    build = _SPECS.get(doc.kind)
    if build is None:
        raise fields.error("kind", doc.kind, f"{doc.kind} is not a queueing kind")
    return build(fields, doc.body)


def _resource_flavor(fields: Fields, body: Mapping[str, Any]) -> dict[str, Any]:
    fields.known_keys(body, _OBJECT_FIELDS, "")
    spec = fields.mapping(body, "spec", "")
    fields.known_keys(
        spec, frozenset({"nodeLabels", "nodeTaints", "tolerations", "topologyName"}), "spec"
    )
    labels = fields.string_map(spec, "nodeLabels", "spec")
    if len(labels) > 8:
        raise fields.error("spec.nodeLabels", len(labels), "at most 8 node labels")
    for key, value in labels.items():
        problem = label_key_problem(key) or label_value_problem(value)
        if problem:
            raise fields.error(join("spec.nodeLabels", key), value, problem)
    topology = fields.optional_string(spec, "topologyName", "spec") or None
    if topology:
        fields.name(topology, "spec.topologyName")
        if not labels:
            raise fields.error(
                "spec.topologyName",
                topology,
                "at least one nodeLabel is required when topologyName is set",
            )
    return {
        "node_labels": labels,
        "node_taints": taints(fields, spec, "nodeTaints", "spec"),
        "tolerations": tolerations(fields, spec, "tolerations", "spec", max_items=8),
        "topology_name": topology,
    }


def _local_queue(fields: Fields, body: Mapping[str, Any]) -> dict[str, Any]:
    fields.known_keys(body, _OBJECT_FIELDS, "")
    spec = fields.mapping(body, "spec", "", required=True)
    fields.known_keys(spec, frozenset({"clusterQueue", "fairSharing", "stopPolicy"}), "spec")
    return {
        "cluster_queue": fields.name(
            fields.string(spec, "clusterQueue", "spec"), "spec.clusterQueue"
        ),
        "stop_policy": fields.choice(spec, "stopPolicy", "spec", STOP_POLICIES, default="None"),
        # Admission fair sharing divides the LocalQueue's usage by it.
        "fair_weight": fair_weight(fields, spec),
    }


def _render_local_queue(spec: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"clusterQueue": spec["cluster_queue"], "stopPolicy": spec["stop_policy"]}
    if spec.get("fair_weight") is not None:
        out["fairSharing"] = {"weight": format_weight(spec["fair_weight"])}
    return out


def _workload_priority_class(fields: Fields, body: Mapping[str, Any]) -> dict[str, Any]:
    fields.known_keys(
        body, frozenset({"apiVersion", "kind", "metadata", "value", "description"}), ""
    )
    description = fields.string(body, "description", "", default="")
    if len(description) > 2048:
        raise fields.error("description", len(description), "at most 2048 characters")
    return {
        "value": fields.integer(body, "value", "", minimum=-INT32_MAX - 1),
        "description": description,
    }


def _priority_class(fields: Fields, body: Mapping[str, Any]) -> dict[str, Any]:
    fields.known_keys(
        body,
        frozenset(
            {
                "apiVersion",
                "kind",
                "metadata",
                "value",
                "globalDefault",
                "description",
                "preemptionPolicy",
            }
        ),
        "",
    )
    name = body["metadata"]["name"]
    limit = INT32_MAX if name.startswith("system-") else _MAX_USER_PRIORITY
    return {
        "value": fields.integer(body, "value", "", minimum=-INT32_MAX - 1, maximum=limit),
        "global_default": fields.boolean(body, "globalDefault", "", default=False),
        "preemption_policy": fields.choice(
            body,
            "preemptionPolicy",
            "",
            ("PreemptLowerPriority", "Never"),
            default="PreemptLowerPriority",
        ),
        "description": fields.string(body, "description", "", default=""),
    }


def _admission_check(fields: Fields, body: Mapping[str, Any]) -> dict[str, Any]:
    fields.known_keys(body, _OBJECT_FIELDS, "")
    spec = fields.mapping(body, "spec", "", required=True)
    # retryDelayMinutes is v1beta1 only and deprecated; Kueue ignores it.
    fields.known_keys(
        spec, frozenset({"controllerName", "parameters", "retryDelayMinutes"}), "spec"
    )
    parameters = fields.optional_mapping(spec, "parameters", "spec")
    if parameters is not None:
        base = "spec.parameters"
        fields.known_keys(parameters, frozenset({"apiGroup", "kind", "name"}), base)
        parameters = {
            "apiGroup": fields.name(
                fields.string(parameters, "apiGroup", base), join(base, "apiGroup")
            ),
            "kind": fields.string(parameters, "kind", base),
            "name": fields.name(
                fields.string(parameters, "name", base), join(base, "name"), "label"
            ),
        }
    return {
        "controller_name": fields.string(spec, "controllerName", "spec"),
        "parameters": parameters,
    }


def _topology(fields: Fields, body: Mapping[str, Any]) -> dict[str, Any]:
    fields.known_keys(body, _OBJECT_FIELDS, "")
    spec = fields.mapping(body, "spec", "", required=True)
    fields.known_keys(spec, frozenset({"levels"}), "spec")
    levels: list[str] = []
    items = fields.mappings(spec, "levels", "spec", min_items=1, max_items=16)
    for i, (path, level) in enumerate(items):
        fields.known_keys(level, frozenset({"nodeLabel"}), path)
        label = fields.string(level, "nodeLabel", path)
        problem = label_key_problem(label, "node label")
        if label in levels:
            problem = f"level {label!r} appears twice"
        # Kueue's CRD rule: hostname identifies single nodes, so it can only be the lowest level.
        if label == HOSTNAME and i != len(items) - 1:
            problem = f"{HOSTNAME} can only be the last level"
        if problem:
            raise fields.error(join(path, "nodeLabel"), label, problem)
        levels.append(label)
    return {"levels": levels}


_SPECS: dict[str, Callable[[Fields, Mapping[str, Any]], dict[str, Any]]] = {
    "ResourceFlavor": _resource_flavor,
    "LocalQueue": _local_queue,
    "WorkloadPriorityClass": _workload_priority_class,
    "PriorityClass": _priority_class,
    "AdmissionCheck": _admission_check,
    "Topology": _topology,
}


def render(kind: str, name: str, namespace: str | None, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest of a normalised queueing object in its storage version, defaults written out."""
    if kind == "Configuration":
        return render_configuration(spec)
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if kind == "PriorityClass":
        return {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": kind,
            "metadata": metadata,
            "value": spec["value"],
            "globalDefault": spec["global_default"],
            "preemptionPolicy": spec["preemption_policy"],
            "description": spec["description"],
        }
    manifest: dict[str, Any] = {
        "apiVersion": KUEUE_STORAGE_VERSION,
        "kind": kind,
        "metadata": metadata,
    }
    if kind == "WorkloadPriorityClass":
        return {**manifest, "value": spec["value"], "description": spec["description"]}
    render_spec = _RENDERERS.get(kind)
    if render_spec is None:
        raise ValueError(f"{kind} is not a queueing kind")
    return {**manifest, "spec": render_spec(spec)}


def _render_flavor(spec: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if spec["node_labels"]:
        out["nodeLabels"] = dict(spec["node_labels"])
    if spec["node_taints"]:
        out["nodeTaints"] = [{k: v for k, v in t.items() if v != ""} for t in spec["node_taints"]]
    if spec["tolerations"]:
        out["tolerations"] = [dict(t) for t in spec["tolerations"]]
    if spec["topology_name"]:
        out["topologyName"] = spec["topology_name"]
    return out


def _render_cluster_queue(stored: Mapping[str, Any]) -> dict[str, Any]:
    spec = ClusterQueueSpec.from_stored(stored)
    preemption, fungibility = spec.preemption, spec.flavor_fungibility
    borrow: dict[str, Any] = {"policy": preemption.borrow_within_cohort.value}
    if preemption.max_priority_threshold is not None:
        borrow["maxPriorityThreshold"] = preemption.max_priority_threshold
    out: dict[str, Any] = {
        "queueingStrategy": spec.queueing_strategy.value,
        "preemption": {
            "withinClusterQueue": preemption.within_cluster_queue.value,
            "reclaimWithinCohort": preemption.reclaim_within_cohort.value,
            "borrowWithinCohort": borrow,
        },
        "flavorFungibility": {
            "whenCanBorrow": fungibility.when_can_borrow.value,
            "whenCanPreempt": fungibility.when_can_preempt.value,
        },
        "resourceGroups": _render_groups(spec.resource_groups),
        "stopPolicy": spec.stop_policy,
    }
    if fungibility.preference:
        out["flavorFungibility"]["preference"] = fungibility.preference.value
    if spec.cohort:
        out["cohortName"] = spec.cohort
    if spec.namespace_selector is not None:
        out["namespaceSelector"] = dict(spec.namespace_selector)
    if spec.admission_checks:
        out["admissionChecksStrategy"] = {
            "admissionChecks": [
                {"name": c.name, **({"onFlavors": list(c.on_flavors)} if c.on_flavors else {})}
                for c in spec.admission_checks
            ]
        }
    if spec.fair_weight is not None:
        out["fairSharing"] = {"weight": format_weight(spec.fair_weight)}
    if spec.admission_mode is not None:
        out["admissionScope"] = {"admissionMode": spec.admission_mode}
    return out


def _render_cohort(stored: Mapping[str, Any]) -> dict[str, Any]:
    spec = CohortSpec.from_stored(stored)
    out: dict[str, Any] = {"resourceGroups": _render_groups(spec.resource_groups)}
    if spec.parent:
        out["parentName"] = spec.parent
    if spec.fair_weight is not None:
        out["fairSharing"] = {"weight": format_weight(spec.fair_weight)}
    return out


def _render_groups(groups: tuple[s.ResourceGroup, ...]) -> list[dict[str, Any]]:
    return [
        {
            "coveredResources": list(group.covered_resources),
            "flavors": [
                {
                    "name": flavor.name,
                    "resources": [_render_quota(r, q) for r, q in flavor.resources.items()],
                }
                for flavor in group.flavors
            ],
        }
        for group in groups
    ]


def _render_quota(resource: str, quota: s.ResourceQuota) -> dict[str, Any]:
    out = {"name": resource, "nominalQuota": format_quantity(resource, quota.nominal)}
    for key, limit in (
        ("borrowingLimit", quota.borrowing_limit),
        ("lendingLimit", quota.lending_limit),
    ):
        if limit is not None:
            out[key] = format_quantity(resource, limit)
    return out


def _render_admission_check(spec: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"controllerName": spec["controller_name"]}
    if spec["parameters"]:
        out["parameters"] = dict(spec["parameters"])
    return out


_RENDERERS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "ResourceFlavor": _render_flavor,
    "ClusterQueue": _render_cluster_queue,
    "Cohort": _render_cohort,
    "LocalQueue": _render_local_queue,
    "AdmissionCheck": _render_admission_check,
    "Topology": lambda spec: {"levels": [{"nodeLabel": label} for label in spec["levels"]]},
}
