"""What one workload would be given now: its flavor assignment and preemption targets.

Follows Kueue `pkg/scheduler/scheduler.go` getInitialAssignments: the full pod counts when
they fit, or when preemption finds targets for them; otherwise, with partial admission, the
largest reduced counts (`partial.search`) that fit or that preemption can make room for;
otherwise the full counts without targets. The scheduling cycle and explain both use it.
"""

from __future__ import annotations

from scheduler import partial
from scheduler.flavors import Assignment, Mode, Pinned, assign_flavors, topology_check
from scheduler.model import ClusterQueue, Victim, Workload
from scheduler.preemption import find_targets
from scheduler.state import ClusterState


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
