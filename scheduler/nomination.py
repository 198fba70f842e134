"""What one workload would be given now: its flavor assignment and preemption targets.

Follows Kueue `pkg/scheduler/scheduler.go` getInitialAssignments: the full pod counts when
they fit, or when preemption finds targets for them; otherwise, with partial admission, the
largest reduced counts (`partial.search`) that fit or that preemption can make room for;
otherwise the full counts without targets. The scheduling cycle and explain both use it.
"""

from __future__ import annotations

from scheduler import partial
from scheduler.flavors import Assignment, Mode, Pinned, assign_flavors, topology_check
from scheduler.model import ClusterQueue, PodSet, Victim, Workload
from scheduler.preemption import find_targets
from scheduler.state import ClusterState
from scheduler.topology import requests_topology


def preemption_targets(
    state: ClusterState, workload: Workload, cq: ClusterQueue, assignment: Assignment
) -> list[Victim]:
    """Kueue `Preemptor.GetTargets` for an assignment that needs preemption; else none."""
    if not assignment.needs_preemption_search:
        return []
    return find_targets(
        state,
        workload,
        cq,
        assignment.usage,
        assignment.needs_preemption,
        topology_check(state, workload, cq, assignment),
    )


def nominate(
    state: ClusterState,
    workload: Workload,
    cq: ClusterQueue,
    *,
    partial_admission: bool,
    pinned: Pinned | None = None,
) -> tuple[Assignment, list[Victim]]:
    """Kueue `getInitialAssignments`; `partial_admission` is the PartialAdmission gate."""
    full = assign_flavors(state, workload, cq, pinned)
    targets = preemption_targets(state, workload, cq, full)
    if full.mode is Mode.FIT or targets:
        return full, targets
    if not (partial_admission and partial.can_be_partially_admitted(workload)):
        return full, []

    def fits(counts: dict[str, int]) -> tuple[Assignment, list[Victim]] | None:
        assignment = assign_flavors(state, workload, cq, pinned, counts)
        victims = preemption_targets(state, workload, cq, assignment)
        return (assignment, victims) if assignment.mode is Mode.FIT or victims else None

    return partial.search(workload.pod_sets, fits) or (full, [])


_Fit = tuple[tuple[PodSet, ...], ClusterQueue, Assignment]


class Repeats:
    """Nominations that are plain Fits, for the heads of one shape that follow in a deep queue.

    Where each resource group of the ClusterQueue has one flavor, `assign_flavors` gives a
    workload the same full-count assignment, Fit without borrowing, as long as its usage still
    fits without borrowing (the one flavor's `fitsResourceQuota`, kueue-semantics §4); its
    PodSets decide the rest, and the snapshot shares one PodSets object among workloads of one
    shape. Nothing else is reused: TAS placements depend on the nodes' usage."""

    def __init__(self, state: ClusterState):
        self._state = state
        self._fits: dict[tuple[str, int], _Fit] = {}
        """(ClusterQueue name, id of the PodSets) -> the PodSets, the ClusterQueue, the Fit."""

    def get(self, workload: Workload, cq: ClusterQueue) -> Assignment | None:
        """The remembered Fit for workloads of this shape, if it still holds."""
        known = self._fits.get((cq.name, id(workload.pod_sets)))
        # The entry keeps its PodSets alive, so no other object can have their id.
        if known is None or known[1] is not cq:
            return None
        assignment = known[2]
        tree, node = self._state.tree, self._state.tree.cq(cq.name)
        for fr, amount in assignment.usage.items():
            if amount > tree.available(node, fr) or tree.borrowing_level(node, fr, amount):
                return None
        return assignment

    def put(self, workload: Workload, cq: ClusterQueue, assignment: Assignment) -> None:
        """Remember an unpinned nomination if it may repeat: a Fit at full counts (not one
        partial admission reduced, which a full-count Fit may replace once quota frees)."""
        if (
            assignment.mode is Mode.FIT
            and not assignment.borrowing
            and not assignment.messages
            and all(
                psa.count == ps.count
                for psa, ps in zip(assignment.pod_sets, workload.pod_sets, strict=True)
            )
            and all(len(group.flavors) == 1 for group in cq.resource_groups)
            and not any(requests_topology(ps, self._state.tas_only(cq)) for ps in workload.pod_sets)
        ):
            self._fits[(cq.name, id(workload.pod_sets))] = (workload.pod_sets, cq, assignment)
