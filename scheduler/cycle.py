"""Kueue's scheduling loop over one snapshot (kueue-semantics §2, §3).

`schedule` runs cycles back to back, as Kueue does while cycles make progress: each cycle
pops one head per ClusterQueue, nominates them against the cycle's snapshot, orders them
(borrowing level, priority, age) and processes them against the snapshot as it changes.
Preemptors are never admitted in the cycle that evicts their victims: the caller stops the
victims, and a later call admits the preemptor once their quota is released.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from scheduler.fairsharing import Tournament
from scheduler.flavors import Assignment, Mode, Pinned
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
from scheduler.nomination import Repeats, nominate
from scheduler.queues import Queues, shape_of
from scheduler.state import ClusterState
from scheduler.topology import placements_fit

MAX_CYCLES = 100_000

T = TypeVar("T")


@dataclass(slots=True)
class _Entry:
    workload: Workload
    cq: ClusterQueue
    assignment: Assignment
    targets: list[Victim]


@dataclass(slots=True)
class _Cycle:
    """What one cycle has claimed so far: victims, and usage it holds only until its end."""

    claimed: dict[str, Victim] = field(default_factory=dict)
    reserved: list[tuple[str, dict[FlavorResource, int]]] = field(default_factory=list)


def schedule(
    snapshot: Snapshot, max_cycles: int = MAX_CYCLES, max_admissions: int | None = None
) -> Decisions:
    """Run scheduling cycles until one makes no progress; return every decision taken.

    `max_admissions` models a Kueue whose API writes bound it (its client's QPS): once that
    many workloads are admitted, the entries left in the cycle wait for the next call.
    """
    state = ClusterState(snapshot)
    pending_workloads = [w for w in snapshot.workloads if w.admission is None]
    run = _Run(state, snapshot, pending_workloads, max_admissions)
    cycles = 0
    while cycles < max_cycles and not run.spent():
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
    def __init__(
        self,
        state: ClusterState,
        snapshot: Snapshot,
        pending: list[Workload],
        budget: int | None = None,
    ):
        self.state = state
        self.budget = budget
        self.admitted: list[Admit] = []
        self.preemptions: list[Preempt] = []
        self.pending: dict[str, Pending] = {}
        self.evicting = {w.key for w in snapshot.workloads if w.evicting}
        self.block_admission = snapshot.config.block_admission
        self.not_ready = any(w.admission and not w.pods_ready for w in snapshot.workloads)
        """An admitted workload waits for its pods (Kueue's cache `WorkloadsNotReady`)."""
        self.blocked = False
        self.partial_admission = snapshot.config.partial_admission
        self.repeats = Repeats(state)
        self.shapes: dict[str, tuple[object, ...]] = {}
        """`shape_of` by key of the pending workloads, which stay the same objects all run."""
        eligible = []
        active = {name for name, cq in state.cluster_queues.items() if cq.active}
        for workload in pending:
            if workload.cluster_queue in active:  # the common case, without a problem
                eligible.append(workload)
                continue
            problem = self._queue_problem(workload)
            if problem is None:
                eligible.append(workload)
            else:
                self.pending[workload.key] = problem
        self.queues = Queues(eligible, snapshot, state.local_queue_usage)

    def _queue_problem(self, workload: Workload) -> Pending | None:
        """Kueue `WorkloadReconciler.getQueueBlocker`: reasons and messages as it writes them."""
        name = workload.cluster_queue
        if name is None:
            return Pending(
                workload.key, PendingReason.MISCONFIGURED, "LocalQueue doesn't exist", False
            )
        cq = self.state.cluster_queues.get(name)
        if cq is None:
            message = f"ClusterQueue {name} doesn't exist"
            return Pending(workload.key, PendingReason.MISCONFIGURED, message, False)
        if not cq.active:
            message = f"ClusterQueue {name} is inactive"
            return Pending(workload.key, PendingReason.INACTIVE_CLUSTER_QUEUE, message, False)
        return None

    def spent(self) -> bool:
        return self.blocked or (self.budget is not None and len(self.admitted) >= self.budget)

    def cycle(self) -> bool:
        """One Kueue scheduling cycle; False when it admitted and parked nothing."""
        entries = [self._nominate(w) for w in self.queues.heads()]
        cycle = _Cycle()
        progress = False
        for entry in self._ordered(entries):
            if self.spent():
                break
            admitted = self._process(entry, cycle)
            if not admitted and entry.cq.queueing_strategy is QueueingStrategy.STRICT_FIFO:
                self._block_behind(entry)
            progress |= admitted or self._parked(entry)
        for cq_name, usage in cycle.reserved:
            self.state.tree.remove(self.state.tree.cq(cq_name), usage)
        return progress

    def _ordered(self, entries: list[_Entry]) -> Iterable[_Entry]:
        """Kueue `makeIterator`: the fair sharing tournament when fair sharing is on, else
        borrowing level, priority, age."""

        def order(e: _Entry) -> tuple[int, float, str]:
            return (-e.workload.priority, e.workload.created, e.workload.key)

        if self.state.config.fair_sharing:
            return Tournament(
                self.state, entries, lambda e: e.cq.name, lambda e: e.assignment.usage, order
            )
        return sorted(entries, key=lambda e: (e.assignment.borrowing, *order(e)))

    def _nominate(self, workload: Workload) -> _Entry:
        assert workload.cluster_queue is not None
        cq = self.state.cq(workload.cluster_queue)
        repeat = self.repeats.get(workload, cq)
        if repeat is not None:
            return _Entry(workload, cq, repeat, [])
        entry = _Entry(workload, cq, Assignment(), [])
        self._assign(entry)
        self.repeats.put(workload, cq, entry.assignment)
        return entry

    def _assign(self, entry: _Entry, pinned: Pinned | None = None) -> None:
        """Kueue `getAssignments`, partial admission included (`nomination.nominate`)."""
        entry.assignment, entry.targets = nominate(
            self.state,
            entry.workload,
            entry.cq,
            partial_admission=self.partial_admission,
            pinned=pinned,
        )

    def _process(self, entry: _Entry, cycle: _Cycle) -> bool:
        """Kueue `processEntry`; True when the workload was admitted."""
        deferred = False
        if any(t.workload in cycle.claimed for t in entry.targets):
            deferred = self._recompute(entry, cycle)
        assignment = entry.assignment
        if assignment.mode is Mode.NO_FIT:
            self._requeue(entry, assignment.reason, assignment.message)
            return False
        if assignment.mode is not Mode.FIT and not entry.targets:
            self._reserve_unreclaimable(entry, cycle)
            message = assignment.message or "no workloads to preempt"
            self._requeue(entry, PendingReason.WAITING_FOR_QUOTA, message)
            return False
        if deferred:
            # It fits once another entry's victims are gone: hold its quota and wait for them.
            self._reserve(entry.cq, dict(assignment.usage), cycle)
            self._wait(entry, "fits once the workloads preempted for another workload are gone")
            return False
        if any(t.workload in cycle.claimed for t in entry.targets):
            return self._skip(entry, "overlapping preemption targets with another workload")
        if not self._without(cycle.claimed, lambda: self._fits_after(entry)):
            return self._skip(entry, "no longer fits after processing another workload")
        if entry.targets:
            self._preempt(entry, cycle)
            return False
        if self.block_admission and (self.not_ready or self.admitted):
            return self._wait_for_pods_ready(entry)
        self._admit(entry)
        return True

    def _wait_for_pods_ready(self, entry: _Entry) -> bool:
        """Kueue `Scheduler.waitForPodsReadyIfNeeded` (blockAdmission): the scheduler stops
        until every admitted workload's pods are ready, this entry first in line; a workload
        admitted earlier in this run has no ready pods yet."""
        key = entry.workload.key
        message = "waiting for all admitted workloads to be in PodsReady condition"
        self.pending[key] = Pending(key, PendingReason.WAITING_FOR_PODS_READY, message, False)
        self.blocked = True
        return False

    def _recompute(self, entry: _Entry, cycle: _Cycle) -> bool:
        """Another entry of this cycle evicts some of the same workloads: assign again as if
        they were gone, keeping the nominated flavors (gate
        RecomputeAssignmentUponPreemptionTargetsOverlap). True when it then fits outright."""
        pinned = {ps.name: ps.flavors for ps in entry.assignment.pod_sets}

        def again() -> bool:
            self._assign(entry, pinned)
            return entry.assignment.mode is Mode.FIT

        return self._without(cycle.claimed, again)

    def _preempt(self, entry: _Entry, cycle: _Cycle) -> None:
        for victim in entry.targets:
            cycle.claimed[victim.workload] = victim
        self._reserve(entry.cq, dict(entry.assignment.usage), cycle)
        fresh = tuple(v for v in entry.targets if v.workload not in self.evicting)
        if fresh:
            self.preemptions.append(Preempt(entry.workload.key, fresh))
            self.evicting.update(v.workload for v in fresh)
            self._mark_evicting(fresh)
        self._wait(entry, f"Pending the preemption of {len(entry.targets)} workload(s)")

    def _fits_after(self, entry: _Entry) -> bool:
        return self._without([t.workload for t in entry.targets], lambda: self._fits(entry))

    def _fits(self, entry: _Entry) -> bool:
        pod_sets = entry.assignment.pod_sets
        if not self.state.tree.fits(self.state.tree.cq(entry.cq.name), entry.assignment.usage):
            return False
        # Only pods placed by TAS can have lost their nodes.
        return all(psa.topology_assignment is None for psa in pod_sets) or placements_fit(
            entry.workload.pod_sets,
            pod_sets,
            self.state.flavors,
            self.state.nodes,
            self.state.topology.used(),
        )

    def _without(self, keys: Iterable[str], check: Callable[[], T]) -> T:
        """Evaluate `check` as if those of `keys` (victims) holding quota had released it."""
        gone = self.state.release_all([k for k in keys if k in self.state.admitted])
        if not gone:  # the common case: nothing to release or hold again
            return check()
        try:
            return check()
        finally:
            self.state.hold_all(gone)

    def _mark_evicting(self, victims: tuple[Victim, ...]) -> None:
        for victim in victims:
            workload = self.state.admitted[victim.workload]
            self.state.admitted[victim.workload] = replace(workload, evicting=True)

    def _reserve(self, cq: ClusterQueue, usage: dict[FlavorResource, int], cycle: _Cycle) -> None:
        self.state.tree.add(self.state.tree.cq(cq.name), usage)
        cycle.reserved.append((cq.name, usage))

    def _reserve_unreclaimable(self, entry: _Entry, cycle: _Cycle) -> None:
        """Preemption found no candidates: unless the queue can always reclaim, keep part of
        the request from lower entries for the rest of the cycle (Kueue
        `quotaResourcesToReserve`, §2.5)."""
        cq, assignment = entry.cq, entry.assignment
        if cq.preemption.reclaim_within_cohort is PreemptionPolicy.ANY:
            return
        tree, node = self.state.tree, self.state.tree.cq(cq.name)
        usage = {}
        for fr, amount in assignment.usage.items():
            limit = tree.borrowing_limit(node, fr)
            if assignment.borrowing == 0:
                cap = tree.nominal(node, fr) - tree.usage(node, fr)
            elif limit is None:
                cap = amount
            else:
                cap = tree.nominal(node, fr) + limit - tree.usage(node, fr)
            usage[fr] = max(0, min(amount, cap))
        self._reserve(cq, usage, cycle)

    def _admit(self, entry: _Entry) -> None:
        workload = entry.workload
        admission = Admission(entry.cq.name, tuple(entry.assignment.pod_sets))
        holding = replace(workload, admission=admission)
        self.state.hold(holding, entry.assignment.usage)
        self.queues.charge(holding)
        self.queues.removed.add(workload.key)
        self.pending.pop(workload.key, None)
        self.admitted.append(Admit(workload.key, admission, entry.assignment.borrowing > 0))

    def _wait(self, entry: _Entry, message: str) -> None:
        key = entry.workload.key
        reason = PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS
        self.pending[key] = Pending(key, reason, message, False)

    def _skip(self, entry: _Entry, message: str) -> bool:
        key = entry.workload.key
        self.pending[key] = Pending(key, PendingReason.SKIPPED, message, False)
        return False

    def _parked(self, entry: _Entry) -> bool:
        pending = self.pending.get(entry.workload.key)
        return pending is not None and pending.parked

    def _requeue(self, entry: _Entry, reason: PendingReason, message: str) -> None:
        """NoFit: StrictFIFO keeps the head (blocking); BestEffortFIFO parks its shape."""
        workload = entry.workload
        if entry.cq.queueing_strategy is QueueingStrategy.STRICT_FIFO:
            self.pending[workload.key] = Pending(workload.key, reason, message, False)
            return
        shape = self._shape(workload)
        for other in self.queues.members(entry.cq.name):
            if other.key == workload.key or self._shape(other) == shape:
                self.queues.removed.add(other.key)
                self.pending[other.key] = Pending(other.key, reason, message, True)

    def _shape(self, workload: Workload) -> tuple[object, ...]:
        # Each NoFit compares its shape with every queued workload: work each out once.
        shape = self.shapes.get(workload.key)
        if shape is None:
            shape = self.shapes[workload.key] = shape_of(workload.priority, workload.pod_sets)
        return shape

    def _block_behind(self, entry: _Entry) -> None:
        """Everything behind a StrictFIFO head that was not admitted waits for it."""
        blocked = f"blocked behind the head of StrictFIFO ClusterQueue {entry.cq.name}"
        for other in self.queues.members(entry.cq.name):
            if other.key != entry.workload.key:
                self.pending[other.key] = Pending(
                    other.key, PendingReason.BLOCKED_BY_HEAD, blocked, False
                )
