"""Would these manifests be admitted now? The real path, rolled back.

`whatif` runs exactly what `kubectl apply` runs (services.apply, then admission and the
simulated cluster at `now`, inline whatever ACCELPLANE_ADMISSION says: a worker would only
see the rolled-back transaction), reads what happened from the rows and the event log, and
rolls everything back. Events are published only on commit and no task is enqueued on this
path, so nothing escapes the rolled-back transaction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Max, QuerySet

from clusters.models import Cluster
from events.models import Event
from workloads import admission, checkpoints, runtime, services
from workloads.explain import workload_ref
from workloads.manifests import QUEUE_KINDS, Document
from workloads.models import KubeObject, Pod, Workload
from workloads.quantities import format_quantity
from workloads.status import WORKLOAD_KINDS


class _RollBack(Exception):
    """Leaves the what-if's transaction, carrying the report read inside it."""

    def __init__(self, report: dict[str, Any]):
        super().__init__("what-if rolled back")
        self.report = report


def whatif(
    cluster: Cluster,
    text: str,
    source: str,
    now: datetime,
    *,
    namespace: str | None = None,
    authorize: Callable[[Document], None] | None = None,
) -> dict[str, Any]:
    """JSON-ready: per workload of the applied objects, whether it would be admitted at `now`
    ("admitted", "admitted_after_preemption" once its victims stop, or "pending" with Kueue's
    reason), its flavors and placement, and whom it would preempt at what cost in steps;
    per object Kueue does not queue, the nodes its pods would take and why any would wait.

    Raises ManifestError for invalid manifests, as `services.apply` does; nothing is stored.
    """
    try:
        with transaction.atomic():
            raise _RollBack(_apply_and_observe(cluster, text, source, now, namespace, authorize))
    except _RollBack as rolled_back:
        return rolled_back.report


def _apply_and_observe(
    cluster: Cluster,
    text: str,
    source: str,
    now: datetime,
    namespace: str | None,
    authorize: Callable[[Document], None] | None,
) -> dict[str, Any]:
    # Catch a simulated cluster up to `now` first (checkpoints due, pods ready), as live
    # mode's tick would, so that steps lost are counted from the right checkpoint. A real
    # cluster's rows are its watch's.
    if cluster.provider == Cluster.Provider.SIM:
        admission.settle(cluster, now)
    last_event = Event.objects.aggregate(last=Max("id"))["last"] or 0
    last_workload = Workload.objects.aggregate(last=Max("id"))["last"] or 0
    applied = services.apply(
        cluster,
        text,
        source=source,
        now=now,
        namespace=namespace,
        admit=services.Admit.DRY_RUN,
        authorize=authorize,
    )
    log = Event.objects.filter(cluster=cluster.name, id__gt=last_event)
    rows = Workload.objects.filter(
        owner__in=[a.pk for a in applied if a.kind not in QUEUE_KINDS],
        phase__in=Workload.ACTIVE_PHASES,
    ).select_related("owner")
    owners = [a.pk for a in applied if a.kind in WORKLOAD_KINDS]
    return {
        "applied": [{"object": a.key, "action": a.action} for a in applied],
        "workloads": [_outcome(row, row.pk > last_workload, log) for row in rows],
        "unqueued": [_unqueued(obj) for obj in _without_workloads(owners)],
    }


def _without_workloads(owner_ids: list[int]) -> QuerySet[KubeObject]:
    """The objects Kueue does not queue (no queue-name label): it made no workload of them."""
    objects = KubeObject.objects.filter(pk__in=owner_ids, workloads__isnull=True)
    return objects.select_related("cluster").order_by("pk")


def _unqueued(obj: KubeObject) -> dict[str, Any]:
    """kube-scheduler binds its pods at `now` as nodes allow: where, what they take there,
    and why the others wait (its FailedScheduling message)."""
    pods = list(Pod.objects.filter(owner=obj))
    takes: dict[str, int] = defaultdict(int)
    for pod in pods:
        if pod.node_id is not None:
            for resource, amount in pod.scheduling["requests"].items():
                takes[resource] += amount
    return {
        "object": obj.key,
        "pods": len(pods),
        "nodes": _bound(Pod.objects.filter(owner=obj)),
        "takes": {r: format_quantity(r, v) for r, v in sorted(takes.items()) if v},
        "unplaced": runtime.unplaced(obj.cluster, pods),
    }


def _outcome(row: Workload, new: bool, log: QuerySet[Event]) -> dict[str, Any]:
    victims = _victims(row, log)
    holding = row.phase in Workload.HOLDING_QUOTA
    result = _result(holding, bool(victims))
    return {
        "workload": workload_ref(row),
        "new": new,
        "result": result,
        "phase": row.phase,
        "cluster_queue": row.cluster_queue_name or None,
        "pending": None
        if holding
        else {"reason": row.pending_reason, "message": row.pending_message},
        "pod_sets": [_pod_set(p) for p in row.assignments],
        "nodes": _nodes(row),
        "preempts": victims,
    }


def _result(holding: bool, preempted_others: bool) -> str:
    """Kueue admits a preemptor only once its victims stop: both count as admitted now."""
    if not holding:
        return "pending"
    return "admitted_after_preemption" if preempted_others else "admitted"


def _pod_set(assignment: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": assignment["name"],
        "count": assignment["count"],
        "flavors": assignment["flavors"],
        "topology": assignment.get("topology"),
    }


def _nodes(row: Workload) -> list[dict[str, str]]:
    """Where kube-scheduler bound its pods at `now` (pods still starting included)."""
    return _bound(Pod.objects.filter(workload=row))


def _bound(pods: QuerySet[Pod]) -> list[dict[str, str]]:
    bound = pods.filter(node__isnull=False).order_by("name")
    return [
        {"pod": name, "node": node, "node_pool": pool}
        for name, node, pool in bound.values_list("name", "node__name", "node__node_pool__name")
    ]


def _victims(row: Workload, log: QuerySet[Event]) -> list[dict[str, Any]]:
    """The workloads preempted for this one, with the steps each lost since its checkpoint
    (as `runtime.stop_evicted` counted them when it stopped them)."""
    preempted = log.filter(
        kind="workload.preempted",
        data__preemptor=row.name,
        data__preemptor_object=row.owner.key,
    ).order_by("id")
    return [_victim(row, event, log) for event in preempted]


def _victim(row: Workload, preempted: Event, log: QuerySet[Event]) -> dict[str, Any]:
    victim = (
        Workload.objects.filter(
            cluster=row.cluster, namespace=preempted.namespace, name=preempted.workload_name
        )
        .select_related("owner")
        .first()
    )
    reason = preempted.data["reason"]
    if victim is None:  # deleted by the same apply: the event still names it
        name = {"namespace": preempted.namespace, "name": preempted.workload_name}
        return {**name, "object": preempted.object_key, "reason": reason, "steps_lost": None}
    training = victim.owner.kind in runtime.TRAINING_KINDS
    return {
        **workload_ref(victim),
        "reason": reason,
        "steps_lost": _steps_lost(preempted, log) if training else None,
        "resumes_from_step": checkpoints.latest_step(victim) if training else None,
    }


def _steps_lost(preempted: Event, log: QuerySet[Event]) -> int | None:
    evicted = log.filter(
        kind="workload.evicted",
        namespace=preempted.namespace,
        workload_name=preempted.workload_name,
        id__gt=preempted.id,
    ).first()
    if evicted is None:  # not stopped at `now` (the simulator stops evicted pods at once)
        return None
    return int(evicted.data["steps_lost"])
