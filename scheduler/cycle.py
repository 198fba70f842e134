"""Kueue's scheduling loop over one snapshot (kueue-semantics §2, §3).

`schedule` runs cycles back to back, as Kueue does while cycles make progress: each cycle
pops one head per ClusterQueue, nominates them against the cycle's snapshot, orders them
(borrowing level, priority, age) and processes them against the snapshot as it changes.
Preemptors are never admitted in the cycle that evicts their victims: the caller stops the
victims, and a later call admits the preemptor once their quota is released.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from scheduler.flavors import Assignment, Mode, assign_flavors
from scheduler.model import (
    Admission,
    Admit,
    ClusterQueue,
    Decisions,
    FlavorResource,
    Pending,
    PendingReason,
    Preempt,
    PreemptionPolicy,
    QueueingStrategy,
    Snapshot,
    Victim,
    Workload,
)
from scheduler.preemption import find_targets
from scheduler.state import ClusterState

MAX_CYCLES = 100_000


@dataclass(slots=True)
class _Entry:
    workload: Workload
    cq: ClusterQueue
    assignment: Assignment
    targets: list[Victim]


def queue_order(workload: Workload) -> tuple[bool, int, float, str]:
    """Heap order inside a ClusterQueue: sticky preemptor, priority, age, key (§3)."""
    return (not workload.preempting, -workload.priority, workload.created, workload.key)


def shape_of(workload: Workload) -> tuple[object, ...]:
    """Kueue's SchedulingEquivalenceHashing: workloads that would get the same answer."""
    return tuple(
        (
            ps.name,
            ps.count,
            tuple(sorted(ps.requests.items())),
            tuple(sorted(ps.node_selector.items())),
            ps.required_affinity,
            ps.tolerations,
        )
        for ps in workload.pod_sets
    )


class _Queues:
    """Per-ClusterQueue heaps of pending workloads; parked ones wait outside the heap."""

    def __init__(self, pending: list[Workload]):
        self._heaps: dict[str, list[tuple[tuple[bool, int, float, str], Workload]]] = {}
        for workload in pending:
            if workload.parked or workload.cluster_queue is None:
                continue
            self._heaps.setdefault(workload.cluster_queue, []).append(
                (queue_order(workload), workload)
            )
        for heap in self._heaps.values():
            heapq.heapify(heap)
        self.removed: set[str] = set()

    def heads(self) -> list[Workload]:
        heads = []
        for heap in self._heaps.values():
            while heap and heap[0][1].key in self.removed:
                heapq.heappop(heap)
            if heap:
                heads.append(heap[0][1])
        return heads

    def members(self, cq_name: str) -> list[Workload]:
        return [w for _, w in self._heaps.get(cq_name, []) if w.key not in self.removed]


def schedule(snapshot: Snapshot, max_cycles: int = MAX_CYCLES) -> Decisions:
    """Run scheduling cycles until one makes no progress; return every decision taken."""
    state = ClusterState(snapshot)
    pending_workloads = [w for w in snapshot.workloads if w.admission is None]
    run = _Run(state, snapshot, pending_workloads)
    cycles = 0
    while cycles < max_cycles:
        cycles += 1
        if not run.cycle():
            break
    return Decisions(
        admitted=tuple(run.admitted),
        preemptions=tuple(run.preemptions),
        pending=tuple(run.pending.values()),
        cycles=cycles,
    )


class _Run:
    def __init__(self, state: ClusterState, snapshot: Snapshot, pending: list[Workload]):
        self.state = state
        self.admitted: list[Admit] = []
        self.preemptions: list[Preempt] = []
        self.pending: dict[str, Pending] = {}
        self.evicting = {w.key for w in snapshot.workloads if w.evicting}
        eligible = []
        for workload in pending:
            problem = self._queue_problem(workload)
            if problem is None:
                eligible.append(workload)
            else:
                self.pending[workload.key] = problem
        self.queues = _Queues(eligible)

    def _queue_problem(self, workload: Workload) -> Pending | None:
        name = workload.cluster_queue
        if name is None:
            return Pending(
                workload.key, PendingReason.MISSING_QUEUE, "LocalQueue doesn't exist", False
            )
        cq = self.state.cluster_queues.get(name)
        if cq is None:
            message = f"ClusterQueue {name} doesn't exist"
            return Pending(workload.key, PendingReason.INACTIVE_CLUSTER_QUEUE, message, False)
        if not cq.active:
            message = f"ClusterQueue {name} is inactive"
            return Pending(workload.key, PendingReason.INACTIVE_CLUSTER_QUEUE, message, False)
        return None

    def cycle(self) -> bool:
        """One Kueue scheduling cycle; False when it admitted and parked nothing."""
        entries = [self._nominate(w) for w in self.queues.heads()]
        entries.sort(
            key=lambda e: (
                e.assignment.borrowing,
                -e.workload.priority,
                e.workload.created,
                e.workload.key,
            )
        )
        claimed: dict[str, Victim] = {}
        reserved: list[tuple[str, dict[FlavorResource, int]]] = []
        progress = False
        for entry in entries:
            progress |= self._process(entry, claimed, reserved)
        for cq_name, usage in reserved:
            self.state.tree.remove(self.state.tree.cq(cq_name), usage)
        return progress

    def _nominate(self, workload: Workload) -> _Entry:
        assert workload.cluster_queue is not None
        cq = self.state.cq(workload.cluster_queue)
        assignment = assign_flavors(self.state, workload, cq)
        targets: list[Victim] = []
        if assignment.mode in (Mode.PREEMPT, Mode.RECLAIM):
            targets = find_targets(
                self.state, workload, cq, assignment.usage, assignment.needs_preemption
            )
        return _Entry(workload, cq, assignment, targets)

    def _process(
        self,
        entry: _Entry,
        claimed: dict[str, Victim],
        reserved: list[tuple[str, dict[FlavorResource, int]]],
    ) -> bool:
        workload, cq, assignment = entry.workload, entry.cq, entry.assignment
        if assignment.mode is Mode.NO_FIT:
            return self._requeue(entry, assignment.reason, "; ".join(assignment.messages))
        if assignment.mode is not Mode.FIT and not entry.targets:
            if cq.preemption.reclaim_within_cohort is not PreemptionPolicy.ANY:
                usage = self._unreclaimable_reservation(cq, assignment)
                self.state.tree.add(self.state.tree.cq(cq.name), usage)
                reserved.append((cq.name, usage))
            message = "; ".join(assignment.messages) or "no workloads to preempt"
            return self._requeue(entry, PendingReason.PREEMPTION_NO_CANDIDATES, message)
        if any(t.workload in claimed for t in entry.targets):
            # Another entry of this cycle evicts some of the same workloads: look again as if
            # they were gone (gate RecomputeAssignmentUponPreemptionTargetsOverlap).
            entry.targets = self._without(claimed, lambda: self._retarget(entry))
            if assignment.mode is not Mode.FIT and not entry.targets:
                return self._skip(entry, "preemption targets were claimed by another workload")
        if not self._without(claimed, lambda: self._fits_after(entry)):
            return self._skip(entry, "no longer fits after processing another workload")
        if entry.targets:
            for victim in entry.targets:
                claimed[victim.workload] = victim
            self.state.tree.add(self.state.tree.cq(cq.name), assignment.usage)
            reserved.append((cq.name, dict(assignment.usage)))
            fresh = tuple(v for v in entry.targets if v.workload not in self.evicting)
            if fresh:
                self.preemptions.append(Preempt(workload.key, fresh))
                self.evicting.update(v.workload for v in fresh)
                self._mark_evicting(fresh)
            count = len(entry.targets)
            self.pending[workload.key] = Pending(
                workload.key,
                PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS,
                f"Pending the preemption of {count} workload(s)",
                False,
            )
            return False
        self._admit(entry)
        return True

    def _retarget(self, entry: _Entry) -> list[Victim]:
        return find_targets(
            self.state,
            entry.workload,
            entry.cq,
            entry.assignment.usage,
            entry.assignment.needs_preemption,
        )

    def _fits_after(self, entry: _Entry) -> bool:
        released = [t.workload for t in entry.targets if t.workload in self.state.admitted]
        removed = [self.state.admitted[k] for k in released]
        for key in released:
            self.state.release(key)
        fits = self.state.tree.fits(self.state.tree.cq(entry.cq.name), entry.assignment.usage)
        for workload in removed:
            self.state.hold(workload)
        return fits

    def _without(self, claimed: dict[str, Victim], check):  # type: ignore[no-untyped-def]
        gone = [self.state.admitted[k] for k in claimed if k in self.state.admitted]
        for workload in gone:
            self.state.release(workload.key)
        try:
            return check()
        finally:
            for workload in gone:
                self.state.hold(workload)

    def _mark_evicting(self, victims: tuple[Victim, ...]) -> None:
        for victim in victims:
            workload = self.state.admitted[victim.workload]
            self.state.admitted[victim.workload] = replace(workload, evicting=True)

    def _unreclaimable_reservation(
        self, cq: ClusterQueue, assignment: Assignment
    ) -> dict[FlavorResource, int]:
        """Quota kept from lower entries when preemption found no candidates (§2.5)."""
        tree, node = self.state.tree, self.state.tree.cq(cq.name)
        usage = {}
        for fr, amount in assignment.usage.items():
            if assignment.borrowing == 0:
                usage[fr] = max(0, min(amount, tree.nominal(node, fr) - tree.usage(node, fr)))
            else:
                usage[fr] = amount
        return usage

    def _admit(self, entry: _Entry) -> None:
        workload = entry.workload
        admission = Admission(entry.cq.name, tuple(entry.assignment.pod_sets))
        self.state.hold(replace(workload, admission=admission))
        self.queues.removed.add(workload.key)
        self.pending.pop(workload.key, None)
        self.admitted.append(Admit(workload.key, admission, entry.assignment.borrowing > 0))

    def _skip(self, entry: _Entry, message: str) -> bool:
        key = entry.workload.key
        self.pending[key] = Pending(key, PendingReason.SKIPPED, message, False)
        return False

    def _requeue(self, entry: _Entry, reason: PendingReason, message: str) -> bool:
        """NoFit: StrictFIFO keeps the head (blocking); BestEffortFIFO parks its shape."""
        workload = entry.workload
        if entry.cq.queueing_strategy is QueueingStrategy.STRICT_FIFO:
            self.pending[workload.key] = Pending(workload.key, reason, message, False)
            for other in self.queues.members(entry.cq.name):
                if other.key != workload.key:
                    blocked = f"blocked behind the head of StrictFIFO ClusterQueue {entry.cq.name}"
                    self.pending[other.key] = Pending(
                        other.key, PendingReason.BLOCKED_BY_HEAD, blocked, False
                    )
            return False
        shape = shape_of(workload)
        for other in self.queues.members(entry.cq.name):
            if other.key == workload.key or shape_of(other) == shape:
                self.queues.removed.add(other.key)
                self.pending[other.key] = Pending(other.key, reason, message, True)
        return True
