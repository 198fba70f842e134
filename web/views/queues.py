"""A ClusterQueue's or a LocalQueue's workloads, as KueueViz shows them: those holding quota,
and the pending ones in the order the scheduler will try them (workloads.queueing), live.

Everyone signed in may look; a team member sees other teams' workloads only as "another
team's workload" (their place, priority, wait and reason stay: they explain the queue)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone

from teams.services import Scope
from web.panels import HIDDEN
from web.views.common import caller, cluster_named, page
from workloads import parking, queueing
from workloads.manifests import ClusterQueueSpec
from workloads.models import ClusterQueue, LocalQueue, Workload

# Which events change what these pages show.
LIVE_ON = "workload. clusterqueue. localqueue."


def _row(row: Workload, scope: Scope, now: datetime, parked: parking.Parked) -> dict[str, Any]:
    visible = scope.can_read(row.namespace)
    waited_until = row.quota_reserved_at or now
    return {
        "workload": row.name if visible else HIDDEN,
        "object_id": row.owner_id if visible else None,
        "namespace": row.namespace if visible else "",
        "local_queue": row.queue_name if visible else "",
        "priority": row.priority,
        "priority_class": row.priority_class_name if visible else "",
        "queued_at": row.queued_at,
        "wait": waited_until - row.queued_at,
        "phase": row.phase,
        "evicting": row.evicting,
        "admitted_at": row.quota_reserved_at,
        "reason": row.pending_reason or ("Inadmissible" if parked.of(row) else ""),
        # The scheduler's words may quote the workload; the reason alone names nobody.
        "message": row.pending_message if visible else "",
    }


def _pending_rows(
    order: list[Workload],
    scope: Scope,
    now: datetime,
    parked: parking.Parked,
    local_queue: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Rows with their 1-based place in the ClusterQueue and in their LocalQueue; only those
    of `local_queue` (namespace, name) when given."""
    rows, in_local = [], dict[tuple[str, str], int]()
    for position, workload in enumerate(order, start=1):
        queue = (workload.namespace, workload.queue_name)
        in_local[queue] = in_local.get(queue, 0) + 1
        if local_queue is None or queue == local_queue:
            place = {"position": position, "local_position": in_local[queue]}
            rows.append({**_row(workload, scope, now, parked), **place})
    return rows


def _shown(
    rows: Iterable[Workload], scope: Scope, now: datetime, parked: parking.Parked
) -> list[dict[str, Any]]:
    return [_row(row, scope, now, parked) for row in rows]


@login_required
def cluster_queue(request: HttpRequest, name: str, queue: str) -> HttpResponse:
    """A ClusterQueue's admitted and pending workloads, its LocalQueues and their places."""
    cluster = cluster_named(name)
    cq = ClusterQueue.objects.filter(cluster=cluster, name=queue).first()
    if cq is None:
        raise Http404(f"no ClusterQueue {queue}")
    scope = caller(request)
    strategy = ClusterQueueSpec.from_stored(cq.spec).queueing_strategy

    def queued() -> dict[str, Any]:
        now, parked = timezone.now(), parking.now(cluster.pk)
        order = queueing.pending_in_order(cluster, cq.name, strategy)
        holding = queueing.holding_quota(cluster, cluster_queue_name=cq.name)
        return {
            "pending": _pending_rows(order, scope, now, parked),
            "holding": _shown(holding, scope, now, parked),
        }

    local_queues = scope.filter(
        LocalQueue.objects.filter(cluster=cluster, cluster_queue_name=cq.name)
    )
    context = {
        "cluster": cluster,
        "queue": cq,
        "title": f"ClusterQueue {cq.name}",
        "strategy": strategy.value,
        "local_queues": list(local_queues.order_by("namespace", "name")),
        "live_on": LIVE_ON,
    }
    return page(request, "web/queue.html", {"queued": queued}, context)


@login_required
def local_queue(request: HttpRequest, name: str, namespace: str, queue: str) -> HttpResponse:
    """A LocalQueue's admitted and pending workloads, with their places in it and in its
    ClusterQueue. Only for those who may read its namespace, as the API's LocalQueues."""
    cluster = cluster_named(name)
    scope = caller(request)
    lq = scope.filter(LocalQueue.objects.filter(cluster=cluster, namespace=namespace, name=queue))
    found = lq.first()
    if found is None:
        raise Http404(f"no LocalQueue {namespace}/{queue}")
    cq = ClusterQueue.objects.filter(cluster=cluster, name=found.cluster_queue_name).first()

    def queued() -> dict[str, Any]:
        now, parked = timezone.now(), parking.now(cluster.pk)
        holding = queueing.holding_quota(cluster, namespace=namespace, queue_name=queue)
        if cq is None:  # Kueue keeps them pending, and tries none: there is no heap to be in
            pending = Workload.objects.filter(
                cluster=cluster, namespace=namespace, queue_name=queue, phase=Workload.Phase.PENDING
            )
            return {
                "pending": _shown(pending, scope, now, parked),
                "holding": _shown(holding, scope, now, parked),
            }
        strategy = ClusterQueueSpec.from_stored(cq.spec).queueing_strategy
        order = queueing.pending_in_order(cluster, cq.name, strategy)
        return {
            "pending": _pending_rows(order, scope, now, parked, (namespace, queue)),
            "holding": _shown(holding, scope, now, parked),
        }

    context = {
        "cluster": cluster,
        "queue": found,
        "title": f"LocalQueue {namespace}/{queue}",
        "cluster_queue": cq,
        "live_on": LIVE_ON,
    }
    return page(request, "web/queue.html", {"queued": queued}, context)
