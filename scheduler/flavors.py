"""Flavor assignment with Kueue's fungibility rules (kueue-semantics §4).

Follows `pkg/scheduler/flavorassigner/flavorassigner.go`: PodSets in order, all resources of
one resource group get the same flavor, flavors tried in the ClusterQueue's order, and the
per-resource mode is Fit, Preempt (needs in-ClusterQueue preemption), Reclaim (only other
queues' borrowed quota), NoCandidates or NoFit, each with a borrowing level.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum

from scheduler.model import (
    POD,
    PODS,
    ClusterQueue,
    FlavorQuotas,
    FlavorResource,
    FungibilityPolicy,
    FungibilityPreference,
    PendingReason,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    Workload,
)
from scheduler.preemption import find_targets
from scheduler.state import ClusterState
from scheduler.topology import (
    Placement,
    flavor_mismatch,
    place_workload,
    requests_topology,
    topology_frs,
)

Pinned = Mapping[str, Mapping[str, str]]
"""PodSet name -> resource -> the only flavor to consider (Kueue's NominationMapping)."""


class Mode(IntEnum):
    """Worse modes are smaller: the workload's mode is the minimum over its resources."""

    NO_FIT = 0
    NO_CANDIDATES = 1
    PREEMPT = 2
    RECLAIM = 3
    FIT = 4


# How much a NoFit reason says "never" (flavorassigner.go `reasonSeverity`): among a group's
# alternative flavors the least severe wins, across groups and PodSets the most severe.
_SEVERITY = {
    PendingReason.TOPOLOGY_PLACEMENT_FAILED: 1,
    PendingReason.WAITING_FOR_QUOTA: 2,
    PendingReason.EXCEEDS_MAX_QUOTA: 3,
    PendingReason.NO_MATCHING_FLAVOR: 4,
}


@dataclass(frozen=True, slots=True)
class Granular:
    """Kueue's granularMode: preemption mode plus borrowing level."""

    mode: Mode
    borrowing: int = 0


_BEST = Granular(Mode.FIT, 0)


@dataclass(slots=True)
class Assignment:
    pod_sets: list[PodSetAssignment] = field(default_factory=list)
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    mode: Mode = Mode.FIT
    borrowing: int = 0
    needs_preemption: set[FlavorResource] = field(default_factory=set)
    reason: PendingReason = PendingReason.WAITING_FOR_QUOTA
    messages: list[str] = field(default_factory=list)

    @property
    def needs_preemption_search(self) -> bool:
        return self.mode in (Mode.PREEMPT, Mode.RECLAIM, Mode.NO_CANDIDATES)

    @property
    def message(self) -> str:
        return "; ".join(self.messages)

    def fail(self, reason: PendingReason) -> None:
        """A resource group found no flavor: NoFit, reporting the most severe group reason."""
        if self.mode is not Mode.NO_FIT or _SEVERITY[reason] > _SEVERITY[self.reason]:
            self.reason = reason
        self.mode = Mode.NO_FIT


@dataclass(slots=True)
class _Choice:
    flavor: str
    representative: Granular = _BEST
    max_borrowing: int = 0
    preempt: set[FlavorResource] = field(default_factory=set)


@dataclass(slots=True)
class _Group:
    """One resource group of one PodSet, being assigned a flavor."""

    pod_set: PodSet
    group: ResourceGroup
    resources: list[str]
    requests: Mapping[str, int]
    pinned: Mapping[str, str]
    failures: list[PendingReason] = field(default_factory=list)

    def failure(self) -> PendingReason:
        if not self.failures:
            return PendingReason.NO_MATCHING_FLAVOR
        return min(self.failures, key=_SEVERITY.__getitem__)


def is_preferred(a: Granular, b: Granular, preference: FungibilityPreference | None = None) -> bool:
    """Kueue `isPreferred`: NoFit is worst and a flavor without preemption candidates ranks
    below any viable one; then BorrowingOverPreemption (the default) compares the preemption
    mode first and the borrowing level on a tie, PreemptionOverBorrowing the other way round."""
    if a.mode is Mode.NO_FIT:
        return False
    if b.mode is Mode.NO_FIT:
        return True
    if (a.mode is Mode.NO_CANDIDATES) != (b.mode is Mode.NO_CANDIDATES):
        return b.mode is Mode.NO_CANDIDATES
    if preference is FungibilityPreference.PREEMPTION_OVER_BORROWING:
        if a.borrowing != b.borrowing:
            return a.borrowing < b.borrowing
        return a.mode > b.mode
    if a.mode != b.mode:
        return a.mode > b.mode
    return a.borrowing < b.borrowing


def assign_flavors(
    state: ClusterState,
    workload: Workload,
    cq: ClusterQueue,
    pinned: Pinned | None = None,
    counts: Mapping[str, int] | None = None,
) -> Assignment:
    """Kueue `FlavorAssigner.Assign`; `counts` (PodSet name -> pods) scales PodSets down for
    partial admission, and the PodSetAssignments carry those counts."""
    result = Assignment()
    covers_pods = any(PODS in g.covered_resources for g in cq.resource_groups)
    for pod_set in workload.pod_sets:
        count = pod_set.count if counts is None else counts[pod_set.name]
        requests = {r: v * count for r, v in pod_set.requests.items() if v}
        if covers_pods:
            requests[PODS] = count * POD
        flavors: dict[str, str] = {}
        for group, resources in _groups_for(cq, requests, result):
            todo = _Group(pod_set, group, resources, requests, (pinned or {}).get(pod_set.name, {}))
            choice = _choose_flavor(state, workload, cq, todo, result)
            if choice is None:
                result.fail(todo.failure())
                continue
            _record(result, choice, todo, flavors)
        result.pod_sets.append(PodSetAssignment(pod_set.name, flavors, count))
        if result.mode is Mode.NO_FIT:
            break  # Kueue stops at the first PodSet that cannot be assigned
    _place_topology(state, workload, cq, result)
    return result


def _place(
    state: ClusterState,
    workload: Workload,
    cq: ClusterQueue,
    result: Assignment,
    *,
    empty: bool = False,
) -> dict[str, Placement]:
    used = state.topology.non_tas if empty else state.topology.used()
    return place_workload(
        workload.pod_sets,
        result.pod_sets,
        state.flavors,
        state.topologies,
        state.nodes,
        used,
        state.tas_only(cq),
        balanced=state.config.tas_balanced_placement,
    )


def _place_topology(
    state: ClusterState, workload: Workload, cq: ClusterQueue, result: Assignment
) -> None:
    """Kueue flavorassigner.go after quota: TAS placement for a Fit; fragmentation turns Fit
    into Preempt, and no placement even on an empty topology into NoFit (kueue-semantics §11)."""
    tas_only = state.tas_only(cq)
    if result.mode is Mode.NO_FIT or not any(
        requests_topology(ps, tas_only) for ps in workload.pod_sets
    ):
        return
    if result.mode is Mode.FIT:
        placements = _place(state, workload, cq, result)
        failed = next((p for p in placements.values() if not p.fits), None)
        if failed is None:
            result.pod_sets = [
                replace(psa, topology_assignment=placements[psa.name].assignment)
                if psa.name in placements
                else psa
                for psa in result.pod_sets
            ]
            return
        result.messages.append(failed.reason)
        result.mode = Mode.PREEMPT
    failed = next(
        (p for p in _place(state, workload, cq, result, empty=True).values() if not p.fits), None
    )
    if failed is not None:
        result.messages.append(failed.reason)
        result.fail(PendingReason.TOPOLOGY_PLACEMENT_FAILED)
        return
    result.needs_preemption |= topology_frs(workload.pod_sets, result.pod_sets, tas_only)


def topology_check(
    state: ClusterState, workload: Workload, cq: ClusterQueue, result: Assignment
) -> Callable[[], bool] | None:
    """For preemption: whether the workload can be placed at the state's current usage (Kueue
    `workloadFits` also finds a TAS assignment); None when it asks for no TAS."""
    if not any(requests_topology(ps, state.tas_only(cq)) for ps in workload.pod_sets):
        return None
    return lambda: all(p.fits for p in _place(state, workload, cq, result).values())


def _record(result: Assignment, choice: _Choice, todo: _Group, flavors: dict[str, str]) -> None:
    for resource in todo.resources:
        flavors[resource] = choice.flavor
        fr = (choice.flavor, resource)
        result.usage[fr] = result.usage.get(fr, 0) + todo.requests[resource]
    result.mode = min(result.mode, choice.representative.mode)
    result.borrowing = max(result.borrowing, choice.max_borrowing)
    result.needs_preemption |= choice.preempt


def _groups_for(
    cq: ClusterQueue, requests: Mapping[str, int], result: Assignment
) -> list[tuple[ResourceGroup, list[str]]]:
    groups: list[tuple[ResourceGroup, list[str]]] = []
    for resource in requests:
        group = next((g for g in cq.resource_groups if resource in g.covered_resources), None)
        if group is None:
            result.fail(PendingReason.NO_MATCHING_FLAVOR)
            result.messages.append(f"resource {resource} unavailable in ClusterQueue {cq.name}")
            continue
        for known, resources in groups:
            if known is group:
                resources.append(resource)
                break
        else:
            groups.append((group, [resource]))
    return groups


def _choose_flavor(
    state: ClusterState, workload: Workload, cq: ClusterQueue, todo: _Group, result: Assignment
) -> _Choice | None:
    """Kueue `findFlavorForPodSets`: the first flavor that need not look further, or the best."""
    best: _Choice | None = None
    for flavor in todo.group.flavors:
        if todo.pinned and any(
            todo.pinned.get(r, flavor.name) != flavor.name for r in todo.resources
        ):
            continue
        problem = _mismatch(state, cq, flavor.name, todo)
        if problem:
            result.messages.append(problem)
            todo.failures.append(PendingReason.NO_MATCHING_FLAVOR)
            continue
        choice = _quota_fit(state, workload, cq, flavor, todo, result)
        if choice is None:
            continue
        if not _should_try_next_flavor(cq, choice.representative):
            return choice
        preference = cq.flavor_fungibility.preference
        if best is None or is_preferred(choice.representative, best.representative, preference):
            best = choice
    return best


def _mismatch(state: ClusterState, cq: ClusterQueue, name: str, todo: _Group) -> str | None:
    """Why the flavor cannot serve the PodSet, whatever the usage (None: it can). Flavors and
    topologies are fixed for the pass, and workloads of one shape share their PodSets: worked
    out once per PodSet object, resource group and flavor."""
    key = (id(todo.pod_set), id(todo.group), name)
    known = state.flavor_problems.get(key)
    # Keeping the PodSet and ClusterQueue (which holds the group) keeps their ids theirs.
    if known is None or known[1] is not cq:
        problem = _flavor_mismatch(
            state.flavors.get(name), name, todo.pod_set
        ) or _topology_mismatch(state, cq, name, todo)
        known = state.flavor_problems[key] = (todo.pod_set, cq, problem)
    return known[2]


def _flavor_mismatch(flavor: ResourceFlavor | None, name: str, pod_set: PodSet) -> str | None:
    if flavor is None:
        return f"flavor {name} not found"
    tolerations = pod_set.tolerations + flavor.tolerations
    for taint in flavor.node_taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(
            t.tolerates(taint) for t in tolerations
        ):
            return f"untolerated taint {taint.key}={taint.value}:{taint.effect} in flavor {name}"
    # Only label keys the flavor defines are evaluated (Kueue flavorassigner.go).
    for key, value in pod_set.node_selector.items():
        if key in flavor.node_labels and flavor.node_labels[key] != value:
            return f"flavor {name} doesn't match node affinity"
    if pod_set.required_affinity and not any(
        all(req.matches(flavor.node_labels) for req in term if req.key in flavor.node_labels)
        for term in pod_set.required_affinity
    ):
        return f"flavor {name} doesn't match node affinity"
    return None


def _topology_mismatch(
    state: ClusterState, cq: ClusterQueue, name: str, todo: _Group
) -> str | None:
    """Kueue `checkPodSetAndFlavorMatchForTAS`."""
    flavor = state.flavors.get(name)
    if flavor is None:
        return None
    topology = state.topologies.get(flavor.topology_name or "")
    return flavor_mismatch(
        todo.pod_set, flavor, topology, state.tas_only(cq), todo.group.covered_resources
    )


def _quota_fit(
    state: ClusterState,
    workload: Workload,
    cq: ClusterQueue,
    flavor: FlavorQuotas,
    todo: _Group,
    result: Assignment,
) -> _Choice | None:
    """The flavor's representative (worst) mode over the group's resources; None for NoFit."""
    choice = _Choice(flavor.name)
    for resource in todo.resources:
        fr = (flavor.name, resource)
        value = todo.requests[resource] + result.usage.get(fr, 0)
        mode = _fits_resource_quota(state, workload, cq, fr, value, todo, result)
        # No mode is preferred to itself: the common Fit needs no comparison.
        if mode is not choice.representative and is_preferred(
            choice.representative, mode, cq.flavor_fungibility.preference
        ):
            choice.representative = mode
        if mode.mode is Mode.NO_FIT:
            return None
        choice.max_borrowing = max(choice.max_borrowing, mode.borrowing)
        if mode.mode is not Mode.FIT:
            choice.preempt.add(fr)
    return choice


def _fits_resource_quota(
    state: ClusterState,
    workload: Workload,
    cq: ClusterQueue,
    fr: FlavorResource,
    value: int,
    todo: _Group,
    result: Assignment,
) -> Granular:
    """Kueue `fitsResourceQuota`: how `value` of `fr` could be had in this ClusterQueue."""
    tree, node = state.tree, state.tree.cq(cq.name)
    flavor, resource = fr
    potential = tree.potential_available(node, fr)
    if value > potential:
        result.messages.append(
            f"insufficient quota for {resource} in flavor {flavor}, "
            f"request > maximum capacity ({value} > {potential}, milli-units)"
        )
        todo.failures.append(PendingReason.EXCEEDS_MAX_QUOTA)
        return Granular(Mode.NO_FIT)
    borrowing, may_reclaim_in_hierarchy = tree.lowest_subtree_that_fits(node, fr, value)
    available = tree.available(node, fr)
    if value <= available:
        return Granular(Mode.FIT, borrowing) if borrowing else _BEST
    result.messages.append(
        f"insufficient unused quota for {resource} in flavor {flavor}, "
        f"{value - available} more needed (milli-units)"
    )
    if (
        tree.nominal(node, fr) >= value
        or may_reclaim_in_hierarchy
        or _can_preempt_while_borrowing(state, cq)
    ):
        return simulate_preemption(state, workload, cq, fr, value)
    todo.failures.append(PendingReason.WAITING_FOR_QUOTA)
    return Granular(Mode.NO_FIT)


def _can_preempt_while_borrowing(state: ClusterState, cq: ClusterQueue) -> bool:
    """Kueue `canPreemptWhileBorrowing`: borrowWithinCohort, or fair sharing with
    reclaimWithinCohort."""
    preemption = cq.preemption
    return preemption.borrow_within_cohort is not PreemptionPolicy.NEVER or (
        state.config.fair_sharing and preemption.reclaim_within_cohort is not PreemptionPolicy.NEVER
    )


def simulate_preemption(
    state: ClusterState, workload: Workload, cq: ClusterQueue, fr: FlavorResource, value: int
) -> Granular:
    """Kueue's preemption oracle: may preemption help, what kind, and the borrowing after it."""
    tree, node = state.tree, state.tree.cq(cq.name)
    targets = find_targets(state, workload, cq, {fr: value}, {fr})
    if not targets:
        return Granular(Mode.NO_CANDIDATES, tree.borrowing_level(node, fr, value))
    victims = [state.admitted[t.workload] for t in targets]
    for victim in victims:
        state.release(victim.key)
    borrowing = tree.borrowing_level(node, fr, value)
    for victim in victims:
        state.hold(victim)
    own = any(v.admission is not None and v.admission.cluster_queue == cq.name for v in victims)
    return Granular(Mode.PREEMPT if own else Mode.RECLAIM, borrowing)


def _should_try_next_flavor(cq: ClusterQueue, representative: Granular) -> bool:
    """Kueue `shouldTryNextFlavor`."""
    fungibility = cq.flavor_fungibility
    if representative.mode in (Mode.NO_FIT, Mode.NO_CANDIDATES):
        return True
    if (
        representative.mode in (Mode.PREEMPT, Mode.RECLAIM)
        and fungibility.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR
    ):
        return True
    return (
        representative.borrowing > 0
        and fungibility.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR
    )
