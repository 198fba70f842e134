"""Classical preemption: which admitted workloads to evict for a preemptor (kueue-semantics §6).

Follows `pkg/scheduler/preemption/preemption.go` (classicalPreemptions, fillBackWorkloads,
workloadFits) and `classical/candidate_generator.go`: candidates are filtered by policy,
classified (same ClusterQueue, hierarchical reclaim, reclaim with or without borrowing),
ordered, removed one by one until the preemptor fits, then added back where they are not
needed (fill-back) so that the set is minimal-ish.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from scheduler.model import (
    ClusterQueue,
    FlavorResource,
    PreemptionPolicy,
    PreemptionReason,
    Victim,
    Workload,
)
from scheduler.quota import NodeKey
from scheduler.state import ClusterState


class Variant(int, Enum):
    HIERARCHICAL_RECLAIM = 0
    RECLAIM_WITHOUT_BORROWING = 1
    RECLAIM_WHILE_BORROWING = 2
    WITHIN_CLUSTER_QUEUE = 3


_REASONS = {
    Variant.WITHIN_CLUSTER_QUEUE: PreemptionReason.IN_CLUSTER_QUEUE,
    Variant.HIERARCHICAL_RECLAIM: PreemptionReason.IN_COHORT_RECLAMATION,
    Variant.RECLAIM_WITHOUT_BORROWING: PreemptionReason.IN_COHORT_RECLAMATION,
    Variant.RECLAIM_WHILE_BORROWING: PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING,
}


@dataclass(frozen=True, slots=True)
class _Candidate:
    workload: Workload
    variant: Variant


def satisfies_policy(policy: PreemptionPolicy, preemptor: Workload, candidate: Workload) -> bool:
    """Kueue `SatisfiesPreemptionPolicy`, on effective priority."""
    if policy is PreemptionPolicy.LOWER_PRIORITY:
        return candidate.priority < preemptor.priority
    if policy is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
        return candidate.priority < preemptor.priority or (
            candidate.priority == preemptor.priority and preemptor.created < candidate.created
        )
    return policy is PreemptionPolicy.ANY


def find_targets(
    state: ClusterState,
    preemptor: Workload,
    cq: ClusterQueue,
    requests: Mapping[FlavorResource, int],
    needed: Iterable[FlavorResource],
) -> list[Victim]:
    """The workloads to evict so that `requests` fits in `cq`; empty when no set works."""
    needed = frozenset(needed)
    candidates = _candidates(state, preemptor, cq, requests, needed)
    if not candidates:
        return []
    for allow_borrowing in _attempts(state, cq, requests, needed, candidates):
        targets = _minimal_set(state, cq, requests, needed, candidates, allow_borrowing)
        if targets:
            return [Victim(c.workload.key, _REASONS[c.variant]) for c in targets]
    return []


def _candidates(
    state: ClusterState,
    preemptor: Workload,
    cq: ClusterQueue,
    requests: Mapping[FlavorResource, int],
    needed: frozenset[FlavorResource],
) -> list[_Candidate]:
    own = state.tree.cq(cq.name)
    fit_height = _height_of_lowest_subtree_that_fits(state, own, requests, needed)
    found: list[_Candidate] = []
    for workload in state.in_tree_of(cq.name):
        if workload.key == preemptor.key or not needed & state.usage[workload.key].keys():
            continue
        assert workload.admission is not None
        candidate_cq = workload.admission.cluster_queue
        if candidate_cq == cq.name:
            if satisfies_policy(cq.preemption.within_cluster_queue, preemptor, workload):
                found.append(_Candidate(workload, Variant.WITHIN_CLUSTER_QUEUE))
            continue
        if not satisfies_policy(cq.preemption.reclaim_within_cohort, preemptor, workload):
            continue
        lca_height = _lowest_common_ancestor_height(state, own, state.tree.cq(candidate_cq))
        if fit_height is not None and fit_height < lca_height:
            variant = Variant.HIERARCHICAL_RECLAIM
        elif cq.preemption.borrow_within_cohort is PreemptionPolicy.NEVER or (
            workload.priority >= preemptor.priority
        ):
            variant = Variant.RECLAIM_WITHOUT_BORROWING
        elif (
            cq.preemption.max_priority_threshold is not None
            and workload.priority > cq.preemption.max_priority_threshold
        ):
            variant = Variant.RECLAIM_WITHOUT_BORROWING
        else:
            variant = Variant.RECLAIM_WHILE_BORROWING
        found.append(_Candidate(workload, variant))
    # CandidatesOrdering: evicted first, other ClusterQueues before our own, lower priority
    # first, most recently admitted first, then the key.
    found.sort(
        key=lambda c: (
            not c.workload.evicting,
            c.variant is Variant.WITHIN_CLUSTER_QUEUE,
            c.workload.priority,
            -(c.workload.quota_reserved_at or 0.0),
            c.workload.key,
        )
    )
    return found


def _height_of_lowest_subtree_that_fits(
    state: ClusterState,
    own: NodeKey,
    requests: Mapping[FlavorResource, int],
    needed: frozenset[FlavorResource],
) -> int | None:
    """0 when the request fits in the ClusterQueue's own quota, else the cohort height."""
    tree = state.tree
    heights = []
    for fr in needed:
        amount = requests.get(fr, 0)
        if not tree.is_borrowing(own, fr, amount):
            heights.append(0)
            continue
        remaining = amount - tree.local_available(own, fr)
        node = tree.parent(own)
        height: int | None = None
        while node is not None:
            if not tree.is_borrowing(node, fr, remaining):
                height = tree.height(node)
                break
            remaining -= tree.local_available(node, fr)
            node = tree.parent(node)
        if height is None:
            return None
        heights.append(height)
    return max(heights, default=0)


def _lowest_common_ancestor_height(state: ClusterState, a: NodeKey, b: NodeKey) -> int:
    tree = state.tree
    ancestors_of_a = tree.ancestors(a)
    for node in tree.ancestors(b):
        if node in ancestors_of_a:
            return tree.height(node)
    return tree.height(tree.root(a))


def _attempts(
    state: ClusterState,
    cq: ClusterQueue,
    requests: Mapping[FlavorResource, int],
    needed: frozenset[FlavorResource],
    candidates: list[_Candidate],
) -> list[bool]:
    """Whether to search allowing the preemptor to borrow, and in which order."""
    other_cq = [c for c in candidates if c.variant is not Variant.WITHIN_CLUSTER_QUEUE]
    if not other_cq:
        return [True]
    forbid_borrowing = cq.preemption.borrow_within_cohort is PreemptionPolicy.NEVER
    own = state.tree.cq(cq.name)
    under_nominal = all(
        state.tree.usage(own, fr) < state.tree.nominal(own, fr) for fr in needed
    )
    if forbid_borrowing and not under_nominal:
        return [True]
    hierarchical = any(c.variant is Variant.HIERARCHICAL_RECLAIM for c in candidates)
    if forbid_borrowing and not hierarchical:
        return [False, True]
    return [True, False]


def _still_valid(
    state: ClusterState, candidate: _Candidate, needed: frozenset[FlavorResource]
) -> bool:
    """Another ClusterQueue's workload is a target only while that queue borrows what we need."""
    if candidate.variant is Variant.WITHIN_CLUSTER_QUEUE:
        return True
    assert candidate.workload.admission is not None
    node = state.tree.cq(candidate.workload.admission.cluster_queue)
    return any(
        state.tree.usage(node, fr) > state.tree.nominal(node, fr)
        for fr in needed & state.usage[candidate.workload.key].keys()
    )


def _fits(
    state: ClusterState,
    cq: ClusterQueue,
    requests: Mapping[FlavorResource, int],
    allow_borrowing: bool,
) -> bool:
    own = state.tree.cq(cq.name)
    for fr, amount in requests.items():
        if not allow_borrowing and state.tree.is_borrowing(own, fr, amount):
            return False
        if amount > state.tree.available(own, fr):
            return False
    return True


def _minimal_set(
    state: ClusterState,
    cq: ClusterQueue,
    requests: Mapping[FlavorResource, int],
    needed: frozenset[FlavorResource],
    candidates: list[_Candidate],
    allow_borrowing: bool,
) -> list[_Candidate]:
    removed: list[_Candidate] = []
    fitted = False
    for candidate in candidates:
        if allow_borrowing and candidate.variant is Variant.RECLAIM_WITHOUT_BORROWING:
            continue
        if not _still_valid(state, candidate, needed):
            continue
        _remove(state, candidate)
        removed.append(candidate)
        if _fits(state, cq, requests, allow_borrowing):
            fitted = True
            break
    if not fitted:
        for candidate in reversed(removed):
            _restore(state, candidate)
        return []
    # Fill-back: from the second-to-last target back to the first, keep out only those needed.
    targets = [removed[-1]]
    for candidate in reversed(removed[:-1]):
        _restore(state, candidate)
        if _fits(state, cq, requests, allow_borrowing):
            continue
        _remove(state, candidate)
        targets.append(candidate)
    for candidate in targets:
        _restore(state, candidate)
    targets.reverse()
    return targets


def _remove(state: ClusterState, candidate: _Candidate) -> None:
    state.release(candidate.workload.key)


def _restore(state: ClusterState, candidate: _Candidate) -> None:
    state.hold(candidate.workload)
