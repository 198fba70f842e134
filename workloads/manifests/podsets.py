"""A pod template as one Kueue PodSet: per-pod requests and the fields that steer placement."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.topology import request_from_annotations
from workloads.manifests.fields import Fields, join, label_key_problem
from workloads.manifests.scheduling import required_node_affinity, tolerations
from workloads.manifests.slices import SLICE_TOPOLOGY_ANNOTATION, slice_annotations

# Pod-level resources (spec.resources) may set these; they replace the containers' sum.
_POD_LEVEL_RESOURCES = ("cpu", "memory")
_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


@dataclass(frozen=True, slots=True)
class PodSetSpec:
    name: str
    count: int
    min_count: int | None
    requests: dict[str, int]
    """Per pod, milli-units, as Kubernetes' PodRequests() computes them."""
    node_selector: dict[str, str]
    tolerations: tuple[dict[str, Any], ...]
    required_node_affinity: tuple[tuple[dict[str, Any], ...], ...]
    """nodeSelectorTerms (ORed) of matchExpressions (ANDed): {key, operator, values}."""
    annotations: dict[str, str]
    labels: dict[str, str]
    priority_class_name: str | None
    startup_seconds: int
    """The startup probe's initialDelaySeconds, the largest over containers; 0 without one."""
    exclusive_topology: str | None = None
    """JobSet/LWS exclusive placement: each group's pods share one domain of this node label,
    which no other group uses."""
    exclusive_group_pods: int | None = None
    """Pods per group (a JobSet's Job); None: the whole workload is one group (an LWS group)."""


def pod_set(
    fields: Fields,
    template: Mapping[str, Any],
    base: str,
    *,
    name: str,
    count: int,
    min_count: int | None = None,
    slice_pods: int | None = None,
    slice_group: str | None = None,
) -> PodSetSpec:
    """The PodSet of the pod template at field path `base`.

    `slice_pods`: the pods of one Job or LWS group, for a TPU slice-topology annotation
    (default: `count`); `slice_group`: the podset-group-name when PodSets are one sub-slice."""
    metadata = fields.mapping(template, "metadata", base)
    meta_path = join(base, "metadata")
    spec = fields.mapping(template, "spec", base, required=True)
    path = join(base, "spec")
    requests = pod_requests(fields, spec, path)
    return PodSetSpec(
        name=name,
        count=count,
        min_count=min_count,
        requests=requests,
        node_selector=fields.labels(spec, "nodeSelector", path),
        tolerations=tuple(
            _with_extended_resource_tolerations(
                tolerations(fields, spec, "tolerations", path), requests
            )
        ),
        required_node_affinity=required_node_affinity(fields, spec, path),
        annotations=_topology_annotations(
            fields,
            fields.annotations(metadata, "annotations", meta_path),
            join(meta_path, "annotations"),
            (count if slice_pods is None else slice_pods, count),
            requests,
            slice_group,
        ),
        labels=fields.labels(metadata, "labels", meta_path),
        priority_class_name=fields.optional_string(spec, "priorityClassName", path) or None,
        startup_seconds=_startup_seconds(fields, spec, path),
    )


def _topology_annotations(
    fields: Fields,
    annotations: dict[str, str],
    path: str,
    pods: tuple[int, int],
    requests: Mapping[str, int],
    slice_group: str | None,
) -> dict[str, str]:
    """The annotations after the TPU slice webhook, with their TAS request validated."""
    annotations = dict(annotations)  # the manifest itself stays as applied
    shape = annotations.get(SLICE_TOPOLOGY_ANNOTATION)
    if shape is not None:
        try:
            annotations.update(slice_annotations(shape, pods[0], pods[1], requests, slice_group))
        except ValueError as problem:
            raise fields.error(join(path, SLICE_TOPOLOGY_ANNOTATION), shape, str(problem)) from None
    try:
        request_from_annotations(annotations)
    except ValueError as problem:
        raise fields.error(path, None, str(problem)) from None
    return annotations


def pod_requests(fields: Fields, spec: Mapping[str, Any], base: str) -> dict[str, int]:
    """k8s `resourcehelper.PodRequests`, after Kueue filled missing requests from limits.

    max(sum of containers + sidecars, each init container + the sidecars started before it),
    then pod-level requests replace cpu/memory, then overhead is added; zeros are dropped.
    """
    total: dict[str, int] = {}
    for path, container in fields.mappings(spec, "containers", base, min_items=1):
        _add(total, container_requests(fields, container, path))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for path, container in fields.mappings(spec, "initContainers", base):
        requests = container_requests(fields, container, path)
        restart = fields.optional_string(container, "restartPolicy", path)
        if restart not in (None, "Always"):
            raise fields.error(
                join(path, "restartPolicy"),
                restart,
                "an init container's restartPolicy can only be Always",
            )
        if restart == "Always":  # a native sidecar runs for the pod's whole life
            _add(total, requests)
            _add(sidecars, requests)
            candidate = dict(sidecars)
        else:
            candidate = dict(sidecars)
            _add(candidate, requests)
        _max(init_peak, candidate)
    _max(total, init_peak)
    total.update(_pod_level_requests(fields, spec, base))
    overhead = fields.mapping(spec, "overhead", base)
    _add(total, _quantities(fields, overhead, join(base, "overhead")))
    return {name: value for name, value in sorted(total.items()) if value}


def container_requests(fields: Fields, container: Mapping[str, Any], base: str) -> dict[str, int]:
    """Requests with limits filling the missing ones (Kueue's UseLimitsAsMissingRequestsInPod)."""
    resources = fields.mapping(container, "resources", base)
    path = join(base, "resources")
    requests = _quantities(
        fields, fields.mapping(resources, "requests", path), join(path, "requests")
    )
    limits = _quantities(fields, fields.mapping(resources, "limits", path), join(path, "limits"))
    for kind, given in (("requests", requests), ("limits", limits)):
        for name in given:
            if not _is_container_resource(name):
                raise fields.error(
                    join(join(path, kind), name),
                    name,
                    "must be a standard resource for containers (cpu, memory, "
                    "ephemeral-storage, hugepages-<size>) or an extended resource (domain/name)",
                )
    for name, request in requests.items():
        limit = limits.get(name)
        if limit is not None and request > limit:
            raise fields.error(
                join(join(path, "requests"), name),
                resources["requests"][name],
                f"must be less than or equal to the {name} limit",
            )
        if limit is not None and is_extended_resource(name) and request != limit:
            raise fields.error(
                join(join(path, "requests"), name),
                resources["requests"][name],
                f"must equal the {name} limit: extended resources cannot be overcommitted",
            )
    return {**limits, **requests}


def _is_container_resource(name: str) -> bool:
    """Kubernetes' validation: an unqualified name must be a container's standard resource
    (so not `pods`, which only a node's capacity and a quota count)."""
    return "/" in name or name in _CONTAINER_RESOURCES or name.startswith("hugepages-")


def is_extended_resource(name: str) -> bool:
    """Resources outside the kubernetes.io domain, e.g. nvidia.com/gpu and google.com/tpu."""
    domain, slash, _ = name.partition("/")
    return bool(slash) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _quantities(fields: Fields, values: Mapping[str, Any], base: str) -> dict[str, int]:
    result = {}
    for name, value in values.items():
        path = join(base, str(name))
        problem = label_key_problem(str(name), "resource name")
        if problem:
            raise fields.error(path, name, problem)
        result[name] = fields.quantity(value, path)
        if is_extended_resource(name) and result[name] % 1000:
            raise fields.error(path, value, f"{value!r} is not a whole number of {name}")
    return result


def _pod_level_requests(fields: Fields, spec: Mapping[str, Any], base: str) -> dict[str, int]:
    resources = fields.mapping(spec, "resources", base)
    path = join(base, "resources")
    requests = _quantities(
        fields, fields.mapping(resources, "requests", path), join(path, "requests")
    )
    limits = _quantities(fields, fields.mapping(resources, "limits", path), join(path, "limits"))
    merged = {**limits, **requests}
    return {name: merged[name] for name in _POD_LEVEL_RESOURCES if name in merged}


def _with_extended_resource_tolerations(
    given: list[dict[str, Any]], requests: Mapping[str, int]
) -> list[dict[str, Any]]:
    """The ExtendedResourceToleration admission plugin, which GKE enables.

    It tolerates `<resource>:NoSchedule` for every extended resource the pod requests, which
    is how GPU (and TPU) pods land on GKE's tainted accelerator nodes without saying so.
    """
    result = list(given)
    for name in sorted(requests):
        toleration = {"key": name, "operator": "Exists", "effect": "NoSchedule"}
        if is_extended_resource(name) and toleration not in result:
            result.append(toleration)
    return result


def _startup_seconds(fields: Fields, spec: Mapping[str, Any], base: str) -> int:
    delays = [0]
    for key in ("containers", "initContainers"):
        for path, container in fields.mappings(spec, key, base):
            probe = fields.mapping(container, "startupProbe", path)
            delays.append(
                fields.integer(probe, "initialDelaySeconds", join(path, "startupProbe"), default=0)
            )
    return max(delays)


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _max(peak: dict[str, int], candidate: Mapping[str, int]) -> None:
    for name, value in candidate.items():
        peak[name] = max(peak.get(name, 0), value)
