"""Where pending workloads stand in their queues, in the scheduler's own order.

Kueue's visibility API (`pkg/queue/cluster_queue.go` `Snapshot`, served as
`pendingworkloads` with `positionInClusterQueue` / `positionInLocalQueue`, which KueueViz shows)
lists a ClusterQueue's heap and its inadmissible workloads together, sorted by the heap's
ordering: here `scheduler.queue_order`, so a page and the next scheduling cycle agree.
"""

from __future__ import annotations

from django.db.models import QuerySet

import scheduler as s
from clusters.models import Cluster
from workloads.models import LocalQueue, Workload

# What a queue listing shows; the PodSets are left in the database.
_SHOWN = (
    "cluster_id",
    "owner_id",
    "name",
    "namespace",
    "queue_name",
    "cluster_queue_name",
    "priority",
    "priority_class_name",
    "phase",
    "queued_at",
    "quota_reserved_at",
    "admitted_at",
    "pending_reason",
    "pending_message",
    "parked_release",
    "preempting",
    "evicting",
)


def pending_in_order(
    cluster: Cluster, cq_name: str, strategy: s.QueueingStrategy
) -> list[Workload]:
    """The pending workloads of ClusterQueue `cq_name` (those whose LocalQueue points at it),
    first to be tried first; parked (inadmissible) ones keep their place, as in Kueue."""
    queues = set(
        LocalQueue.objects.filter(cluster=cluster, cluster_queue_name=cq_name).values_list(
            "namespace", "name"
        )
    )
    sticky = strategy is s.QueueingStrategy.BEST_EFFORT_FIFO
    pending = Workload.objects.filter(cluster=cluster, phase=Workload.Phase.PENDING)
    entries = []
    for row in pending.only(*_SHOWN):
        if (row.namespace, row.queue_name) in queues:
            # Only the ordering fields matter to queue_order; PodSets play no part in it.
            ordered = s.Workload(
                f"{row.namespace}/{row.name}",
                cq_name,
                row.priority,
                row.queued_at.timestamp(),
                (),
                preempting=row.preempting,
            )
            entries.append((s.queue_order(ordered, sticky), row))
    entries.sort(key=lambda entry: entry[0])
    return [row for _, row in entries]


def holding_quota(cluster: Cluster, **where: str) -> QuerySet[Workload]:
    """The workloads holding quota in `cluster` (`where`: of one ClusterQueue, LocalQueue...),
    in the order they got it."""
    rows = Workload.objects.filter(cluster=cluster, phase__in=Workload.HOLDING_QUOTA, **where)
    return rows.only(*_SHOWN).order_by("quota_reserved_at", "namespace", "name")
