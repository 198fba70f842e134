"""Flavor assignment with Kueue's fungibility rules (kueue-semantics §4).

Follows `pkg/scheduler/flavorassigner/flavorassigner.go`: PodSets in order, all resources of
one resource group get the same flavor, flavors tried in the ClusterQueue's order, and the
per-resource mode is Fit, Preempt (needs in-ClusterQueue preemption), Reclaim (only other
queues' borrowed quota), NoCandidates or NoFit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from scheduler.model import (
    ClusterQueue,
    FlavorQuotas,
    FlavorResource,
    FungibilityPolicy,
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

PODS = "pods"


class Mode(IntEnum):
    """Worse modes are smaller: the workload's mode is the minimum over its resources."""

    NO_FIT = 0
    NO_CANDIDATES = 1
    PREEMPT = 2
    RECLAIM = 3
    FIT = 4


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


@dataclass(slots=True)
class _Choice:
    flavor: str
    mode: Mode
    borrowing: int
    preempt: set[FlavorResource]


def assign_flavors(state: ClusterState, workload: Workload, cq: ClusterQueue) -> Assignment:
    result = Assignment()
    covers_pods = any(PODS in g.covered_resources for g in cq.resource_groups)
    for pod_set in workload.pod_sets:
        requests = {r: v * pod_set.count for r, v in pod_set.requests.items() if v}
        if covers_pods:
            requests[PODS] = pod_set.count * 1000
        flavors: dict[str, str] = {}
        for group, resources in _groups_for(cq, requests, result):
            choice = _choose_flavor(state, workload, cq, pod_set, group, resources, requests, result)
            if choice is None:
                result.mode = Mode.NO_FIT
                continue
            for resource in resources:
                flavors[resource] = choice.flavor
                fr = (choice.flavor, resource)
                result.usage[fr] = result.usage.get(fr, 0) + requests[resource]
            result.mode = min(result.mode, choice.mode)
            result.borrowing = max(result.borrowing, choice.borrowing)
            result.needs_preemption |= choice.preempt
        result.pod_sets.append(PodSetAssignment(pod_set.name, flavors, pod_set.count))
    return result


def _groups_for(
    cq: ClusterQueue, requests: Mapping[str, int], result: Assignment
) -> list[tuple[ResourceGroup, list[str]]]:
    groups: list[tuple[ResourceGroup, list[str]]] = []
    for resource in requests:
        group = next((g for g in cq.resource_groups if resource in g.covered_resources), None)
        if group is None:
            result.mode = Mode.NO_FIT
            result.reason = PendingReason.NO_MATCHING_FLAVOR
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
    state: ClusterState,
    workload: Workload,
    cq: ClusterQueue,
    pod_set: PodSet,
    group: ResourceGroup,
    resources: list[str],
    requests: Mapping[str, int],
    result: Assignment,
) -> _Choice | None:
    best: _Choice | None = None
    for flavor in group.flavors:
        problem = _flavor_mismatch(state.flavors.get(flavor.name), flavor.name, pod_set)
        if problem:
            result.messages.append(problem)
            result.reason = PendingReason.NO_MATCHING_FLAVOR
            continue
        choice = _quota_fit(state, workload, cq, flavor, resources, requests, result)
        if choice.mode is Mode.NO_FIT:
            continue
        if not _should_try_next_flavor(cq, choice):
            return choice
        if best is None or _is_preferred(choice, best):
            best = choice
    if best is not None and best.mode is Mode.NO_CANDIDATES:
        result.reason = PendingReason.PREEMPTION_NO_CANDIDATES
    return best


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


def _quota_fit(
    state: ClusterState,
    workload: Workload,
    cq: ClusterQueue,
    flavor: FlavorQuotas,
    resources: list[str],
    requests: Mapping[str, int],
    result: Assignment,
) -> _Choice:
    choice = _Choice(flavor.name, Mode.FIT, 0, set())
    node = state.tree.cq(cq.name)
    for resource in resources:
        fr = (flavor.name, resource)
        value = requests[resource] + result.usage.get(fr, 0)
        if value > state.tree.potential_available(node, fr):
            result.reason = PendingReason.EXCEEDS_MAX_QUOTA
            result.messages.append(
                f"insufficient quota for {resource} in flavor {flavor.name}, "
                f"request > maximum capacity ({value} > "
                f"{state.tree.potential_available(node, fr)}, milli-units)"
            )
            return _Choice(flavor.name, Mode.NO_FIT, 0, set())
        if value <= state.tree.available(node, fr):
            choice.borrowing = max(choice.borrowing, state.tree.borrowing_level(node, fr, value))
            continue
        result.messages.append(
            f"insufficient unused quota for {resource} in flavor {flavor.name}, "
            f"{value - state.tree.available(node, fr)} more needed (milli-units)"
        )
        mode = _preemption_mode(state, workload, cq, fr, value)
        if mode is Mode.NO_FIT:
            result.reason = PendingReason.WAITING_FOR_QUOTA
            return _Choice(flavor.name, Mode.NO_FIT, 0, set())
        choice.mode = min(choice.mode, mode)
        choice.preempt.add(fr)
        if value > state.tree.nominal(node, fr):
            choice.borrowing = max(choice.borrowing, state.tree.height(state.tree.root(node)))
    return choice


def _preemption_mode(
    state: ClusterState, workload: Workload, cq: ClusterQueue, fr: FlavorResource, value: int
) -> Mode:
    """Whether preemption may help, and what kind (Kueue's preemption oracle)."""
    node = state.tree.cq(cq.name)
    may_preempt = (
        state.tree.nominal(node, fr) >= value
        or _may_reclaim_in_hierarchy(state, cq, fr, value)
        or cq.preemption.borrow_within_cohort is not PreemptionPolicy.NEVER
    )
    if not may_preempt:
        return Mode.NO_FIT
    targets = find_targets(state, workload, cq, {fr: value}, {fr})
    if not targets:
        return Mode.NO_CANDIDATES
    own = state.admitted
    if any(own[t.workload].admission.cluster_queue == cq.name for t in targets):  # type: ignore[union-attr]
        return Mode.PREEMPT
    return Mode.RECLAIM


def _may_reclaim_in_hierarchy(
    state: ClusterState, cq: ClusterQueue, fr: FlavorResource, value: int
) -> bool:
    """A cohort below the root whose own subtree quota covers the request."""
    ancestors = state.tree.ancestors(state.tree.cq(cq.name))
    return any(state.tree.subtree_quota(a, fr) >= value for a in ancestors[:-1])


def _should_try_next_flavor(cq: ClusterQueue, choice: _Choice) -> bool:
    fungibility = cq.flavor_fungibility
    if choice.mode in (Mode.NO_FIT, Mode.NO_CANDIDATES):
        return True
    if choice.mode in (Mode.PREEMPT, Mode.RECLAIM):
        return fungibility.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR
    if choice.borrowing > 0:
        return fungibility.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR
    return False


def _is_preferred(candidate: _Choice, best: _Choice) -> bool:
    """BorrowingOverPreemption (the default): better mode first, then less borrowing."""
    if (candidate.mode is Mode.NO_CANDIDATES) != (best.mode is Mode.NO_CANDIDATES):
        return best.mode is Mode.NO_CANDIDATES
    if candidate.mode != best.mode:
        return candidate.mode > best.mode
    return candidate.borrowing < best.borrowing
