"""What users see of objects and queues: the fields of FORMAT.md's expectations."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from django.db.models import Count

from clusters.models import Cluster
from scheduler import PODS, pod_set_request
from workloads import checkpoints
from workloads.manifests import ClusterQueueSpec
from workloads.models import (
    ClusterQueue,
    KubeObject,
    LocalQueue,
    Pod,
    Slice,
    Workload,
)
from workloads.quantities import format_quantity, parse_quantity

WORKLOAD_KINDS = ("Job", "JobSet", "Deployment", "LeaderWorkerSet")
TRAINING_KINDS = ("Job", "JobSet")
# Pending reasons that mean no quota or flavor can ever fit the workload.
INADMISSIBLE_REASONS = ("ExceedsMaxQuota", "NoMatchingFlavor")
ADMITTED = Workload.Phase.ADMITTED
QUOTA_RESERVED = Workload.Phase.QUOTA_RESERVED
PREEMPTED = "Preempted"  # Kueue's Evicted reason for a preemption; the Preempted one says why
# What a status needs of a pod: ready, node id, phase, its node's pool name.
PodFacts = tuple[bool, int | None, str, str | None]


def object_phase(obj: KubeObject, rows: list[Workload]) -> str:
    active = [w for w in rows if w.phase in Workload.ACTIVE_PHASES]
    if any(w.phase == Workload.Phase.ADMITTED for w in active):
        return "Admitted"
    # Quota reserved, admission checks (the GKE slice controller's) not yet Ready: on its way
    # in, whether or not it was evicted before.
    if any(w.phase == Workload.Phase.QUOTA_RESERVED for w in active):
        return "Admitting"
    if not active and rows:
        return "Failed" if any(w.phase == Workload.Phase.FAILED for w in rows) else "Finished"
    if any(w.pending_reason in INADMISSIBLE_REASONS for w in active):
        return "Inadmissible"
    if obj.preemptions or any(w.admissions for w in active):
        return "Suspended"
    return "Pending"


def object_status(obj: KubeObject) -> dict[str, Any]:
    return object_statuses([obj])[obj.pk]


def object_statuses(objects: Iterable[KubeObject]) -> dict[int, dict[str, Any]]:
    """`object_status` of many objects by pk, in a fixed number of queries however many."""
    objects = list(objects)
    ids = [obj.pk for obj in objects]
    workloads: dict[int, list[Workload]] = defaultdict(list)
    for row in Workload.objects.filter(owner_id__in=ids):  # in `obj.workloads.all()` order
        workloads[row.owner_id].append(row)
    pods: dict[int, list[PodFacts]] = defaultdict(list)
    for owner_id, ready, node_id, phase, pool in Pod.objects.filter(owner_id__in=ids).values_list(
        "owner_id", "ready", "node_id", "phase", "node__node_pool__name"
    ):
        pods[owner_id].append((ready, node_id, phase, pool))
    slices = _slices_per_owner(workloads, ADMITTED, Slice.State.ACTIVE)
    activating = _slices_per_owner(workloads, QUOTA_RESERVED, Slice.State.ACTIVATING)
    training = [obj.pk for obj in objects if obj.kind in TRAINING_KINDS]
    latest_step = checkpoints.latest_steps(training) if training else {}
    return {
        obj.pk: _status(
            obj,
            workloads[obj.pk],
            pods[obj.pk],
            (slices.get(obj.pk, 0), activating.get(obj.pk, 0)),
            latest_step,
        )
        for obj in objects
    }


def _slices_per_owner(
    workloads: Mapping[int, list[Workload]], phase: str, state: str
) -> dict[int, int]:
    """Owner pk -> how many slices in `state` its workloads in `phase` have (one query, none
    when no workload is in that phase)."""
    ids = [w.pk for rows in workloads.values() for w in rows if w.phase == phase]
    if not ids:
        return {}
    rows = Slice.objects.filter(workload__in=ids, state=state).values("workload__owner_id")
    return dict(rows.annotate(count=Count("pk")).values_list("workload__owner_id", "count"))


def _status(
    obj: KubeObject,
    rows: list[Workload],
    pods: list[PodFacts],
    slices: tuple[int, int],
    latest_step: Mapping[int, int],
) -> dict[str, Any]:
    """`slices`: (active slices of its admitted workloads, activating ones of the others)."""
    admitted = [w for w in rows if w.phase == ADMITTED]
    status: dict[str, Any] = {
        "phase": object_phase(obj, rows) if rows or obj.kind in TRAINING_KINDS else "Unmanaged",
        "admitted": len(admitted),
        "pending": sum(w.phase == Workload.Phase.PENDING for w in rows),
        "running": sum(
            ready and node_id is not None and phase == Pod.Phase.RUNNING
            for ready, node_id, phase, _ in pods
        ),
        "preemptions": obj.preemptions,
        "pools": sorted({pool for _, node_id, _, pool in pods if node_id is not None}),
        "slices": slices[0],
    }
    if status["phase"] == "Admitting":
        activating = slices[1]
        status["admitting"] = (
            f"{activating} slice{'s' if activating != 1 else ''} activating"
            if activating
            else "waiting for admission checks"
        )
    flavors = {f for w in admitted for p in w.assignments for f in p["flavors"].values()}
    if len(flavors) == 1:
        status["flavor"] = flavors.pop()
    # Rows are in queue order: the first pending one is the next Kueue will try.
    pending = next((w for w in rows if w.phase == Workload.Phase.PENDING), None)
    if pending is not None and pending.pending_reason:
        status["pendingReason"] = pending.pending_reason
    reasons = sorted({r for w in rows if (r := latest_eviction_reason(w))})
    if reasons:  # several only when a Deployment's pods or an LWS's groups differ
        status["preemptionReason"] = reasons[0] if len(reasons) == 1 else reasons
    if obj.kind in TRAINING_KINDS:
        status["checkpointStep"] = latest_step.get(obj.pk, 0)
        resumed = [w.resumed_from_step for w in admitted if w.resumed_from_step is not None]
        if resumed:
            status["resumedFromStep"] = resumed[0]
    return status


def latest_eviction_reason(row: Workload) -> str:
    """Kueue's reason for the row's latest eviction: the Preempted condition's for a preemption
    (InClusterQueue, InCohortReclamation...), else the Evicted condition's (PodsReadyTimeout...);
    "" if it was never evicted."""
    if row.eviction_reason and row.eviction_reason != PREEMPTED:
        return row.eviction_reason
    return row.preemption_reason


def cluster_queue_status(cluster: Cluster) -> dict[str, dict[str, Any]]:
    lq_target = {
        (ns, name): cq
        for ns, name, cq in LocalQueue.objects.filter(cluster=cluster).values_list(
            "namespace", "name", "cluster_queue_name"
        )
    }
    usage: dict[str, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    lq_counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in Workload.objects.filter(cluster=cluster, phase__in=Workload.ACTIVE_PHASES):
        lq = (row.namespace, row.queue_name)
        if row.phase == Workload.Phase.PENDING:
            target = lq_target.get(lq)
            if target:
                counts[target]["pending"] += 1
            lq_counts[lq]["pending"] += 1
            continue
        cq_name = row.cluster_queue_name
        _add_usage(usage[cq_name], row)
        if row.phase == Workload.Phase.ADMITTED:
            counts[cq_name]["admitted"] += 1
            lq_counts[lq]["admitted"] += 1
    result = {}
    for cq in ClusterQueue.objects.filter(cluster=cluster):
        result[cq.key] = _cq_fields(cq, usage[cq.name], counts[cq.name])
    for local_queue in LocalQueue.objects.filter(cluster=cluster):
        c = lq_counts[(local_queue.namespace, local_queue.name)]
        result[local_queue.key] = {
            "pendingWorkloads": c["pending"],
            "admittedWorkloads": c["admitted"],
        }
    return result


def _cq_fields(
    cq: ClusterQueue, usage: dict[tuple[str, str], int], counts: dict[str, int]
) -> dict[str, Any]:
    total: dict[str, int] = defaultdict(int)
    borrowed: dict[str, int] = defaultdict(int)
    by_flavor: dict[str, dict[str, str]] = defaultdict(dict)
    for flavor, resource, quota in ClusterQueueSpec.from_stored(cq.spec).quotas():
        used = usage.get((flavor, resource), 0)
        total[resource] += used
        borrowed[resource] += max(0, used - quota.nominal)
        by_flavor[flavor][resource] = format_quantity(resource, used)
    return {
        "usage": {r: format_quantity(r, v) for r, v in sorted(total.items())},
        "usageByFlavor": dict(by_flavor),
        "borrowed": {r: format_quantity(r, v) for r, v in sorted(borrowed.items())},
        "pendingWorkloads": counts["pending"],
        "admittedWorkloads": counts["admitted"],
    }


def cluster_status(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Every workload owner and every queue of a cluster, keyed as scenarios name them."""
    objects = list(KubeObject.objects.filter(cluster=cluster, kind__in=WORKLOAD_KINDS))
    statuses = object_statuses(objects)
    result = {obj.key: statuses[obj.pk] for obj in objects}
    result.update(cluster_queue_status(cluster))
    return result


def queue_rows(cluster: Cluster) -> list[dict[str, Any]]:
    """Per ClusterQueue, flavor and resource: nominal quota and current usage, for the page."""
    fields = cluster_queue_status(cluster)
    rows = []
    for cq in ClusterQueue.objects.filter(cluster=cluster):
        state = fields[cq.key]
        quotas = [
            {
                "flavor": flavor,
                "resource": resource,
                "nominal": format_quantity(resource, quota.nominal),
                "percent": _percent(state["usage"].get(resource, "0"), quota.nominal),
            }
            for flavor, resource, quota in ClusterQueueSpec.from_stored(cq.spec).quotas()
        ]
        rows.append({"queue": cq, "state": state, "quotas": quotas})
    return rows


def _percent(used: str, nominal: int) -> int:
    used_milli = parse_quantity(used, field="usage", bounded=False)  # a sum: may pass the bound
    return min(100, round(100 * used_milli / nominal)) if nominal else 0


def cluster_queue_usage(cluster: Cluster, cq: ClusterQueue) -> dict[str, Any]:
    """Per flavor and resource of one ClusterQueue: quota, limits, what is used and borrowed,
    and the demand of its pending workloads (per resource: they have no flavor yet)."""
    return cluster_queue_usages(cluster, [cq])[cq.name]


def cluster_queue_usages(
    cluster: Cluster, queues: Iterable[ClusterQueue] | None = None
) -> dict[str, dict[str, Any]]:
    """`cluster_queue_usage` of every ClusterQueue of the cluster (or of `queues`), by name,
    from one pass over the cluster's active workloads."""
    if queues is None:
        queues = ClusterQueue.objects.filter(cluster=cluster)
    return {cq.name: report for cq, report in _usage_reports(queues, cluster)}


def every_cluster_queue_usage() -> list[tuple[ClusterQueue, dict[str, Any]]]:
    """`cluster_queue_usage` of every ClusterQueue of every cluster (cluster loaded), in a fixed
    number of queries however many clusters there are."""
    queues = ClusterQueue.objects.select_related("cluster").order_by("cluster__name", "name")
    return _usage_reports(queues, None)


def _usage_reports(
    queues: Iterable[ClusterQueue], cluster: Cluster | None
) -> list[tuple[ClusterQueue, dict[str, Any]]]:
    usage, pending = _usage_and_demand(cluster)
    return [
        (cq, _usage_report(cq, usage[(cq.cluster_id, cq.name)], pending[(cq.cluster_id, cq.name)]))
        for cq in queues
    ]


def _usage_report(
    cq: ClusterQueue, usage: Mapping[tuple[str, str], int], pending: Mapping[str, int]
) -> dict[str, Any]:
    resources = []
    for flavor, resource, quota in ClusterQueueSpec.from_stored(cq.spec).quotas():
        used = usage.get((flavor, resource), 0)
        resources.append(
            {
                "flavor": flavor,
                "resource": resource,
                "nominal": format_quantity(resource, quota.nominal),
                "used": format_quantity(resource, used),
                "borrowed": format_quantity(resource, max(0, used - quota.nominal)),
                "borrowing_limit": _limit(resource, quota.borrowing_limit),
                "lending_limit": _limit(resource, quota.lending_limit),
                "pending": format_quantity(resource, pending.get(resource, 0)),
            }
        )
    return {"name": cq.name, "cohort": cq.cohort_name or None, "resources": resources}


def _usage_and_demand(
    cluster: Cluster | None,
) -> tuple[
    dict[tuple[int, str], dict[tuple[str, str], int]], dict[tuple[int, str], dict[str, int]]
]:
    """Per (cluster pk, ClusterQueue) of `cluster`, or of every cluster if None: (flavor,
    resource) -> used by its admitted workloads, and resource -> asked by the pending workloads
    of its LocalQueues."""
    usage: dict[tuple[int, str], dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    pending: dict[tuple[int, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    local_queues = LocalQueue.objects.all()
    workloads = Workload.objects.filter(phase__in=Workload.ACTIVE_PHASES)
    if cluster is not None:
        local_queues = local_queues.filter(cluster=cluster)
        workloads = workloads.filter(cluster=cluster)
    target = {
        (cluster_id, namespace, name): cq
        for cluster_id, namespace, name, cq in local_queues.values_list(
            "cluster_id", "namespace", "name", "cluster_queue_name"
        )
    }
    for row in workloads:
        if row.phase != Workload.Phase.PENDING:
            _add_usage(usage[(row.cluster_id, row.cluster_queue_name)], row)
            continue
        cq_name = target.get((row.cluster_id, row.namespace, row.queue_name))
        if cq_name is not None:
            demand = pending[(row.cluster_id, cq_name)]
            for pod_set in row.pod_sets:
                for resource, amount in pod_set["requests"].items():
                    demand[resource] += amount * pod_set["count"]
                # Shown only where the ClusterQueue covers `pods`: one per pod there.
                demand[PODS] += pod_set_request({}, PODS, pod_set["count"])
    return usage, pending


def _add_usage(usage: dict[tuple[str, str], int], row: Workload) -> None:
    by_name = {p["name"]: p for p in row.pod_sets}
    for assignment in row.assignments:
        requests = by_name[assignment["name"]]["requests"]
        for resource, flavor in assignment["flavors"].items():
            usage[(flavor, resource)] += pod_set_request(requests, resource, assignment["count"])


def _limit(resource: str, value: int | None) -> str | None:
    return None if value is None else format_quantity(resource, value)
