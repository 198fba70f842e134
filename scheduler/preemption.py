"""Classical preemption: which admitted workloads to evict for a preemptor (kueue-semantics §6).

Follows `pkg/scheduler/preemption/preemption.go` (classicalPreemptions, fillBackWorkloads,
workloadFits) and `classical/candidate_generator.go`, `classical/hierarchical_preemption.go`:
candidates are filtered by policy, classified (same ClusterQueue, hierarchical reclaim,
reclaim with or without borrowing), ordered, removed one by one until the preemptor fits,
then added back where they are not needed (fill-back) so that the set is minimal-ish.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

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


class Variant(IntEnum):
    """Candidate classes, in the order Kueue tries them (evicted ones first within each)."""

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

# Kueue concatenates hierarchical candidates, then other queues' priority-based candidates,
# then the preemptor's own queue (`NewCandidateIterator`).
_LIST = {
    Variant.HIERARCHICAL_RECLAIM: 0,
    Variant.RECLAIM_WITHOUT_BORROWING: 1,
    Variant.RECLAIM_WHILE_BORROWING: 1,
    Variant.WITHIN_CLUSTER_QUEUE: 2,
}


@dataclass(frozen=True, slots=True)
class _Candidate:
    workload: Workload
    variant: Variant
    lca: NodeKey | None
    """Lowest common ancestor with the preemptor's queue (None for its own queue)."""


@dataclass(frozen=True, slots=True)
class _Search:
    """One preemption search: the preemptor's queue, its whole request, the contested frs."""

    state: ClusterState
    preemptor: Workload
    cq: ClusterQueue
    requests: Mapping[FlavorResource, int]
    needed: frozenset[FlavorResource]
    topology_fits: Callable[[], bool] | None = None
    """TAS: whether the preemptor can be placed at the current usage (None: no TAS)."""

    @property
    def node(self) -> NodeKey:
        return self.state.tree.cq(self.cq.name)


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
    topology_fits: Callable[[], bool] | None = None,
) -> list[Victim]:
    """The workloads to evict so that `requests` fits in `cq`; empty when no set works."""
    search = _Search(state, preemptor, cq, requests, frozenset(needed), topology_fits)
    candidates = _candidates(search)
    if not candidates:
        return []
    for allow_borrowing in _attempts(search, candidates):
        targets = _minimal_set(search, candidates, allow_borrowing)
        if targets:
            return [Victim(c.workload.key, _REASONS[c.variant]) for c in targets]
    return []


def _candidates(search: _Search) -> list[_Candidate]:
    fit_height = _height_of_lowest_subtree_that_fits(search)
    found: list[_Candidate] = []
    for cq_name, keys in search.state.queues_in_tree_of(search.cq.name):
        found += _from_queue(search, cq_name, keys, fit_height)
    # CandidatesOrdering within each list: evicted first, lower priority first, most recently
    # admitted first (a reservation without a time counts as "now"), then the key (UID).
    found.sort(
        key=lambda c: (
            not c.workload.evicting,
            _LIST[c.variant],
            c.workload.priority,
            -(
                c.workload.quota_reserved_at
                if c.workload.quota_reserved_at is not None
                else float("inf")
            ),
            c.workload.key,
        )
    )
    return found


def _from_queue(
    search: _Search, cq_name: str, keys: set[str], fit_height: int | None
) -> list[_Candidate]:
    """One ClusterQueue's candidates (Kueue `getCandidatesFromCQ` and its callers' filters)."""
    preemption, preemptor, tree = search.cq.preemption, search.preemptor, search.state.tree
    if cq_name == search.cq.name:
        policy, variant, lca = preemption.within_cluster_queue, Variant.WITHIN_CLUSTER_QUEUE, None
    else:
        policy = preemption.reclaim_within_cohort
        if policy is PreemptionPolicy.NEVER or not search.state.cq(cq_name).active:
            return []  # Kueue's snapshot leaves inactive queues (and their workloads) out
        lca = _lowest_common_ancestor(search, tree.cq(cq_name))
        if not _borrowing_below(search, tree.cq(cq_name), lca):
            return []
    found = []
    for workload in [search.state.admitted[key] for key in keys]:
        if workload.key == preemptor.key or not satisfies_policy(policy, preemptor, workload):
            continue
        if not search.needed & search.state.usage[workload.key].keys():
            continue
        if lca is not None:
            variant = _variant(search, workload, fit_height, lca)
        found.append(_Candidate(workload, variant, lca))
    return found


def _variant(search: _Search, workload: Workload, fit_height: int | None, lca: NodeKey) -> Variant:
    preemption = search.cq.preemption
    if fit_height is not None and fit_height < search.state.tree.height(lca):
        return Variant.HIERARCHICAL_RECLAIM
    if preemption.borrow_within_cohort is PreemptionPolicy.NEVER:
        return Variant.RECLAIM_WITHOUT_BORROWING
    threshold = preemption.max_priority_threshold
    if workload.priority >= search.preemptor.priority or (
        threshold is not None and workload.priority > threshold
    ):
        return Variant.RECLAIM_WITHOUT_BORROWING
    return Variant.RECLAIM_WHILE_BORROWING


def _height_of_lowest_subtree_that_fits(search: _Search) -> int | None:
    """Height of the lowest node, from the preemptor's queue up, whose quota covers the whole
    request at current usage (Kueue `QuantitiesFitInQuota` along `PathParentToRoot`): 0 when
    the queue's own quota does, None when no node does. Workloads borrowing quota above that
    node can be reclaimed hierarchically."""
    tree = search.state.tree
    remaining = dict(search.requests)
    for node in [search.node, *tree.ancestors(search.node)]:
        if all(not tree.is_borrowing(node, fr, amount) for fr, amount in remaining.items()):
            return tree.height(node)
        remaining = {
            fr: max(0, amount - tree.local_available(node, fr)) for fr, amount in remaining.items()
        }
    return None


def _lowest_common_ancestor(search: _Search, other: NodeKey) -> NodeKey:
    tree = search.state.tree
    mine = tree.ancestors(search.node)
    for node in tree.ancestors(other):
        if node in mine:
            return node
    return tree.root(search.node)


def _borrowing_below(search: _Search, candidate_cq: NodeKey, lca: NodeKey | None) -> bool:
    """The candidate's queue, and each of its cohorts below the common ancestor, uses more than
    its quota on a contested (flavor, resource) (Kueue `candidateIsValid`)."""
    tree = search.state.tree
    if tree.within_quota(candidate_cq, search.needed):
        return False
    for node in tree.ancestors(candidate_cq):
        if node == lca:
            break
        if tree.within_quota(node, search.needed):
            return False
    return True


def _attempts(search: _Search, candidates: list[_Candidate]) -> list[bool]:
    """Whether to search allowing the preemptor to borrow, and in which order."""
    other_cq = [c for c in candidates if c.variant is not Variant.WITHIN_CLUSTER_QUEUE]
    if not other_cq:
        return [True]
    forbid_borrowing = search.cq.preemption.borrow_within_cohort is PreemptionPolicy.NEVER
    tree, node = search.state.tree, search.node
    under_nominal = all(tree.usage(node, fr) < tree.nominal(node, fr) for fr in search.needed)
    if forbid_borrowing and not under_nominal:
        return [True]
    hierarchical = any(c.variant is Variant.HIERARCHICAL_RECLAIM for c in candidates)
    if forbid_borrowing and not hierarchical:
        return [False, True]
    return [True, False]


def _still_valid(search: _Search, candidate: _Candidate, allow_borrowing: bool) -> bool:
    if candidate.variant is Variant.WITHIN_CLUSTER_QUEUE:
        return True
    if allow_borrowing and candidate.variant is Variant.RECLAIM_WITHOUT_BORROWING:
        return False
    assert candidate.workload.admission is not None
    node = search.state.tree.cq(candidate.workload.admission.cluster_queue)
    return _borrowing_below(search, node, candidate.lca)


def _fits(search: _Search, allow_borrowing: bool) -> bool:
    tree, node = search.state.tree, search.node
    for fr, amount in search.requests.items():
        if not allow_borrowing and tree.is_borrowing(node, fr, amount):
            return False
        if amount > tree.available(node, fr):
            return False
    return search.topology_fits is None or search.topology_fits()


def _minimal_set(
    search: _Search, candidates: list[_Candidate], allow_borrowing: bool
) -> list[_Candidate]:
    removed: list[_Candidate] = []
    fitted = False
    for candidate in candidates:
        if not _still_valid(search, candidate, allow_borrowing):
            continue
        search.state.release(candidate.workload.key)
        removed.append(candidate)
        if _fits(search, allow_borrowing):
            fitted = True
            break
    if not fitted:
        _restore(search, removed)
        return []
    # Fill-back: from the second-to-last target back to the first, keep out only those needed.
    targets = [removed[-1]]
    for candidate in reversed(removed[:-1]):
        search.state.hold(candidate.workload)
        if not _fits(search, allow_borrowing):
            search.state.release(candidate.workload.key)
            targets.append(candidate)
    _restore(search, targets)
    targets.reverse()
    return targets


def _restore(search: _Search, candidates: list[_Candidate]) -> None:
    for candidate in candidates:
        search.state.hold(candidate.workload)
