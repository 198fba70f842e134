"""The pending workloads of a scheduling run, per ClusterQueue, in Kueue's queue order
(kueue-semantics §3), and the shapes that get the same answer."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from scheduler.fairsharing import entry_penalty
from scheduler.model import PodSet, QueueingStrategy, Snapshot, Workload

QueueKey = tuple[bool, int, float, str]


def queue_order(workload: Workload, sticky: bool = True) -> QueueKey:
    """Heap order inside a ClusterQueue: sticky preemptor, priority, age, key (§3).

    Only BestEffortFIFO keeps a workload whose preemptions are in flight at the head."""
    first = not (sticky and workload.preempting)
    return (first, -workload.priority, workload.created, workload.key)


def shape_of(priority: int, pod_sets: Sequence[PodSet]) -> tuple[object, ...]:
    """Kueue's SchedulingEquivalenceHashing: workloads of one ClusterQueue that would get the
    same answer, by their priority and PodSets."""
    return (
        priority,
        tuple(
            (
                ps.name,
                ps.count,
                ps.min_count,
                tuple(sorted(ps.requests.items())),
                tuple(sorted(ps.node_selector.items())),
                ps.required_affinity,
                ps.tolerations,
                ps.topology_request,
            )
            for ps in pod_sets
        ),
    )


class Queues:
    """Per-ClusterQueue heaps of pending workloads; parked ones wait outside the heap.

    With admission fair sharing, a ClusterQueue in UsageBasedAdmissionFairSharing mode puts
    the workloads of its least-used LocalQueue first (Kueue `queueOrderingFunc`), and each
    admission adds its entry penalty to its LocalQueue's usage for the rest of the run (Kueue
    pushes it at assume and rebuilds the heap at the next `Pop`)."""

    def __init__(self, pending: list[Workload], snapshot: Snapshot, usage: dict[str, float]):
        cluster_queues = snapshot.cluster_queues
        self._afs = snapshot.config.admission_fair_sharing
        self._afs_queues = {
            name for name, cq in cluster_queues.items() if cq.admission_fair_sharing
        }
        self._lq_usage = usage  # shared with ClusterState.local_queue_usage
        self._lq_weights = snapshot.local_queue_weights
        self._heaps: dict[str, list[tuple[QueueKey, Workload]]] = {}
        sticky = {
            name: cq.queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO
            for name, cq in cluster_queues.items()
        }
        for workload in pending:
            name = workload.cluster_queue
            if workload.parked or name is None:
                continue
            self._heaps.setdefault(name, []).append((queue_order(workload, sticky[name]), workload))
        for heap in self._heaps.values():
            heapq.heapify(heap)
        self.removed: set[str] = set()

    def heads(self) -> list[Workload]:
        heads = []
        for name, heap in self._heaps.items():
            while heap and heap[0][1].key in self.removed:
                heapq.heappop(heap)
            if not heap:
                continue
            if self._uses_afs(name):
                live = (item for item in heap if item[1].key not in self.removed)
                heads.append(min(live, key=lambda item: (self._usage(item[1]), item[0]))[1])
            else:
                heads.append(heap[0][1])
        return heads

    def _uses_afs(self, cq_name: str) -> bool:
        return self._afs is not None and cq_name in self._afs_queues

    def _usage(self, workload: Workload) -> float:
        return self._lq_usage.get(workload.local_queue or "", 0.0)

    def charge(self, workload: Workload) -> None:
        """Kueue `updateEntryPenalty`: an admitted workload's LocalQueue is used more."""
        lq = workload.local_queue
        if self._afs is None or lq is None or workload.admission is None:
            return
        if not self._uses_afs(workload.admission.cluster_queue):
            return
        weight = self._lq_weights.get(lq, 1.0)
        penalty = entry_penalty(workload, weight, self._afs)
        self._lq_usage[lq] = self._lq_usage.get(lq, 0.0) + penalty

    def members(self, cq_name: str) -> list[Workload]:
        return [w for _, w in self._heaps.get(cq_name, []) if w.key not in self.removed]
