"""Classical preemption: which admitted workloads to evict for a preemptor (kueue-semantics §6).

Follows `pkg/scheduler/preemption/preemption.go` (classicalPreemptions, fillBackWorkloads,
workloadFits) and `classical/candidate_generator.go`, `classical/hierarchical_preemption.go`:
candidates are filtered by policy, classified (same ClusterQueue, hierarchical reclaim,
reclaim with or without borrowing), ordered, removed one by one until the preemptor fits,
then added back where they are not needed (fill-back) so that the set is minimal-ish.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cmp_to_key
from typing import TypeVar

from scheduler.fairsharing import DRS, NEGATIVE, compare, drs
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
    """The workloads to evict so that `requests` fits in `cq`; empty when no set works.

    Kueue `getTargets`: fair sharing preemption when the Configuration enables fair sharing,
    classical preemption otherwise."""
    search = _Search(state, preemptor, cq, requests, frozenset(needed), topology_fits)
    if state.config.fair_sharing:
        return _fair_targets(search)
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
    # Evicted ones of every list first, then by list, each list by CandidatesOrdering.
    found.sort(
        key=cmp_to_key(
            lambda a, b: (
                _compare(
                    (not a.workload.evicting, _LIST[a.variant]),
                    (not b.workload.evicting, _LIST[b.variant]),
                )
                or _compare_candidates(search, a.workload, b.workload)
            )
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
    targets = _fill_back(search, removed, lambda c: c.workload, allow_borrowing)
    _restore(search, targets)
    return targets


C = TypeVar("C")


def _fill_back(
    search: _Search, removed: list[C], workload: Callable[[C], Workload], allow_borrowing: bool
) -> list[C]:
    """Kueue `fillBackWorkloads`: from the second-to-last target back to the first, keep out
    only those needed. The returned targets stay released."""
    targets = [removed[-1]]
    for candidate in reversed(removed[:-1]):
        search.state.hold(workload(candidate))
        if not _fits(search, allow_borrowing):
            search.state.release(workload(candidate).key)
            targets.append(candidate)
    targets.reverse()
    return targets


def _restore(search: _Search, candidates: list[_Candidate]) -> None:
    for candidate in candidates:
        search.state.hold(candidate.workload)


# -- fair sharing preemption (Kueue `fairPreemptions`, `preemption/fairsharing`) ----------------

Strategy = Callable[[DRS, DRS, DRS], bool]
"""(preemptor's new share, target's old share, target's new share) -> may it be preempted."""


def less_than_or_equal_to_final_share(preemptor_new: DRS, _old: DRS, target_new: DRS) -> bool:
    """Rule S2-a: the preemptor's share does not exceed the target's once preempted."""
    return compare(preemptor_new, target_new) <= 0


def less_than_initial_share(preemptor_new: DRS, target_old: DRS, _new: DRS) -> bool:
    """Rule S2-b: the preemptor's share stays below the target's share before preemption."""
    return compare(preemptor_new, target_old) < 0


STRATEGIES: dict[str, Strategy] = {
    "LessThanOrEqualToFinalShare": less_than_or_equal_to_final_share,
    "LessThanInitialShare": less_than_initial_share,
}


@dataclass(frozen=True, slots=True)
class _FairTarget:
    workload: Workload
    reason: PreemptionReason


def _fair_targets(search: _Search) -> list[Victim]:
    """Kueue `fairPreemptions`: candidates taken from the ClusterQueues with the highest
    shares first, each removal allowed by the configured strategies."""
    candidates = _fair_candidates(search)
    if not candidates:
        return []
    strategies = [STRATEGIES[name] for name in search.state.config.fair_sharing_strategies]
    tree, node = search.state.tree, search.node
    tree.add(node, search.requests)  # shares count the incoming workload
    fits, targets, retry = _first_strategy(search, candidates, strategies[0])
    if not fits and len(strategies) > 1:
        fits = _second_strategy(search, retry, targets)
    tree.remove(node, search.requests)
    if not fits:
        _restore_targets(search, targets)
        return []
    kept = _fill_back(search, targets, lambda t: t.workload, True)
    _restore_targets(search, kept)
    return [Victim(t.workload.key, t.reason) for t in kept]


def _restore_targets(search: _Search, targets: list[_FairTarget]) -> None:
    for target in targets:
        search.state.hold(target.workload)


def _fair_candidates(search: _Search) -> list[Workload]:
    """Kueue `findCandidates`, ordered by `CandidatesOrdering`: the preemptor's queue by
    withinClusterQueue; other queues of its cohort tree that borrow a contested pair, by
    reclaimWithinCohort."""
    state, tree, preemptor = search.state, search.state.tree, search.preemptor
    preemption = search.cq.preemption
    found: list[Workload] = []
    for cq_name, keys in state.queues_in_tree_of(search.cq.name):
        if cq_name == search.cq.name:
            policy = preemption.within_cluster_queue
        else:
            policy = preemption.reclaim_within_cohort
            node = tree.cq(cq_name)
            if tree.parent(node) is None or not state.cq(cq_name).active:
                continue
            if not any(tree.is_borrowing(node, fr) for fr in search.needed):
                continue
        if policy is PreemptionPolicy.NEVER:
            continue
        for workload in (state.admitted[key] for key in keys):
            if workload.key == preemptor.key or not satisfies_policy(policy, preemptor, workload):
                continue
            if search.needed & state.usage[workload.key].keys():
                found.append(workload)
    found.sort(key=cmp_to_key(lambda a, b: _compare_candidates(search, a, b)))
    return found


def _candidate_order(search: _Search, workload: Workload) -> tuple[object, ...]:
    """Kueue `CandidatesOrdering`: evicted first, other queues before the preemptor's, lower
    priority, most recently reserved (no reservation time counts as now), key."""
    assert workload.admission is not None
    reserved = workload.quota_reserved_at
    return (
        not workload.evicting,
        workload.admission.cluster_queue == search.cq.name,
        workload.priority,
        -(reserved if reserved is not None else float("inf")),
        workload.key,
    )


def _compare_candidates(search: _Search, a: Workload, b: Workload) -> int:
    """Kueue `CandidatesOrdering` with admission fair sharing: `_candidate_order`, except
    that two workloads of one UsageBasedAdmissionFairSharing ClusterQueue from different
    LocalQueues put the one whose LocalQueue has used more first, before priority
    (`resourceUsagePreemptionEnabled`). Not a total order, as in Kueue."""
    a_order, b_order = _candidate_order(search, a), _candidate_order(search, b)
    return (
        _compare(a_order[:2], b_order[:2])
        or _compare(_local_queue_usage(search, b, a), _local_queue_usage(search, a, b))
        or _compare(a_order[2:], b_order[2:])
    )


def _local_queue_usage(search: _Search, workload: Workload, other: Workload) -> float:
    """The usage of `workload`'s LocalQueue when it decides its order against `other`,
    else 0."""
    assert workload.admission is not None
    assert other.admission is not None
    cq_name = workload.admission.cluster_queue
    if (
        search.state.config.admission_fair_sharing is None
        or not search.state.cq(cq_name).admission_fair_sharing
        or cq_name != other.admission.cluster_queue
        or workload.local_queue is None
        or other.local_queue is None
        or workload.local_queue == other.local_queue
    ):
        return 0.0
    return search.state.local_queue_usage.get(workload.local_queue, 0.0)


def _compare(a: tuple[object, ...] | float, b: tuple[object, ...] | float) -> int:
    return (a > b) - (a < b)  # type: ignore[operator]


def _fits_for_fair_sharing(search: _Search) -> bool:
    """Kueue `workloadFitsForFairSharing`: fits, without the incoming workload's own usage."""
    tree, node = search.state.tree, search.node
    tree.remove(node, search.requests)
    try:
        return _fits(search, True)
    finally:
        tree.add(node, search.requests)


def _first_strategy(
    search: _Search, candidates: list[Workload], strategy: Strategy
) -> tuple[bool, list[_FairTarget], list[Workload]]:
    """Kueue `runFirstFsStrategy`: (fits, targets, candidates to retry with rule S2-b)."""
    state, tree = search.state, search.state.tree
    ordering = _TargetOrdering(search, candidates)
    targets: list[_FairTarget] = []
    retry: list[Workload] = []
    # Gate FairSharingPreemptWithinNominal (beta, on): a preemptor that stays within its
    # nominal quota on the contested pairs may reclaim regardless of shares.
    within_nominal = not any(tree.is_borrowing(search.node, fr) for fr in search.needed)
    for cq_name in ordering:
        if cq_name == search.cq.name or within_nominal:
            workload = ordering.pop(cq_name)
            state.release(workload.key)
            reason = (
                PreemptionReason.IN_CLUSTER_QUEUE
                if cq_name == search.cq.name
                else PreemptionReason.IN_COHORT_RECLAMATION
            )
            targets.append(_FairTarget(workload, reason))
            if _fits_for_fair_sharing(search):
                return True, targets, []
            continue
        preemptor_new, target_old = ordering.shares(cq_name)
        if math.isinf(preemptor_new.share) and not math.isinf(target_old.share):
            # No candidate of this queue can pass either strategy (`fsStrategyUnsatisfiable`).
            while ordering.has(cq_name):
                retry.append(ordering.pop(cq_name))
            continue
        while ordering.has(cq_name):
            workload = ordering.pop(cq_name)
            if strategy(preemptor_new, target_old, ordering.share_without(cq_name, workload)):
                state.release(workload.key)
                targets.append(_FairTarget(workload, PreemptionReason.IN_COHORT_FAIR_SHARING))
                if _fits_for_fair_sharing(search):
                    return True, targets, []
                break  # the shares changed: the ordering may now pick another queue
            retry.append(workload)
    return False, targets, retry


def _second_strategy(search: _Search, retry: list[Workload], targets: list[_FairTarget]) -> bool:
    """Kueue `runSecondFsStrategy` (rule S2-b): at most one workload per queue; appends to
    `targets` and returns whether the preemptor then fits."""
    ordering = _TargetOrdering(search, retry)
    for cq_name in ordering:
        preemptor_new, target_old = ordering.shares(cq_name)
        workload = ordering.pop(cq_name)
        if less_than_initial_share(preemptor_new, target_old, target_old):
            search.state.release(workload.key)
            targets.append(_FairTarget(workload, PreemptionReason.IN_COHORT_FAIR_SHARING))
            if _fits_for_fair_sharing(search):
                return True
        ordering.drop(cq_name)
    return False


class _TargetOrdering:
    """Kueue `TargetClusterQueueOrdering`: from the root Cohort down, the child with the
    highest share that still has candidates; the same queue may come again while it stays
    the most unfair. Nodes that can yield no more candidates are pruned."""

    def __init__(self, search: _Search, candidates: list[Workload]):
        self._search = search
        self._tree = search.state.tree
        self._by_cq: dict[str, list[Workload]] = {}
        for workload in candidates:
            assert workload.admission is not None
            self._by_cq.setdefault(workload.admission.cluster_queue, []).append(workload)
        self._pruned: set[NodeKey] = set()
        self._preemptor_path = set(self._tree.ancestors(search.node))

    def has(self, cq_name: str) -> bool:
        return bool(self._by_cq.get(cq_name))

    def pop(self, cq_name: str) -> Workload:
        return self._by_cq[cq_name].pop(0)

    def drop(self, cq_name: str) -> None:
        self._pruned.add(self._tree.cq(cq_name))

    def __iter__(self) -> Iterator[str]:
        node = self._search.node
        if self._tree.parent(node) is None:
            while node not in self._pruned and self.has(self._search.cq.name):
                yield self._search.cq.name
            return
        root = self._tree.root(node)
        while root not in self._pruned:
            target = self._next(root)
            if target is not None:
                yield target

    def _next(self, cohort: NodeKey) -> str | None:
        children = [c for c in sorted(self._tree.children(cohort)) if c not in self._pruned]
        best_cq, best_cq_drs = self._highest_queue([c for c in children if c[0] == "cq"])
        best_cohort, best_cohort_drs = self._highest_cohort(
            [c for c in children if c[0] == "cohort"]
        )
        if best_cohort is None and best_cq is None:
            self._pruned.add(cohort)
            return None
        # A tie goes to the Cohort: the most unfair node can then be found inside it.
        if best_cohort is not None and compare(best_cohort_drs, best_cq_drs) >= 0:
            return self._next(best_cohort)
        assert best_cq is not None
        return best_cq[1]

    def _highest_queue(self, queues: list[NodeKey]) -> tuple[NodeKey | None, DRS]:
        """The borrowing queue with candidates and the highest share; on a tie, the one whose
        first candidate comes first. The preemptor's queue counts even when not borrowing."""
        best: NodeKey | None = None
        best_drs = NEGATIVE
        for queue in queues:
            share = drs(self._search.state, queue)
            if (not share.borrowing and queue != self._search.node) or not self.has(queue[1]):
                self._pruned.add(queue)
            elif best is not None and compare(share, best_drs) == 0:
                mine = _candidate_order(self._search, self._by_cq[queue[1]][0])
                if mine < _candidate_order(self._search, self._by_cq[best[1]][0]):
                    best = queue
            elif compare(share, best_drs) > 0:
                best, best_drs = queue, share
        return best, best_drs

    def _highest_cohort(self, cohorts: list[NodeKey]) -> tuple[NodeKey | None, DRS]:
        """The borrowing Cohort with the highest share (the last one on a tie). A Cohort on
        the preemptor's path stays even when not borrowing: imbalance may remain inside it."""
        best: NodeKey | None = None
        best_drs = NEGATIVE
        for cohort in cohorts:
            share = drs(self._search.state, cohort)
            if not share.borrowing and cohort not in self._preemptor_path:
                self._pruned.add(cohort)
            elif compare(share, best_drs) >= 0:
                best, best_drs = cohort, share
        return best, best_drs

    def _almost_lcas(self, cq_name: str) -> tuple[NodeKey, NodeKey]:
        """Kueue `getAlmostLCAs`: the children of the lowest common Cohort on the paths of the
        preemptor's queue and of the target's queue."""
        target = self._tree.cq(cq_name)
        lca = next(a for a in self._tree.ancestors(target) if a in self._preemptor_path)
        return self._almost_lca(self._search.node, lca), self._almost_lca(target, lca)

    def _almost_lca(self, node: NodeKey, lca: NodeKey) -> NodeKey:
        while self._tree.parent(node) != lca:
            parent = self._tree.parent(node)
            assert parent is not None
            node = parent
        return node

    def shares(self, cq_name: str) -> tuple[DRS, DRS]:
        """Kueue `ComputeShares`: (preemptor's new share, target's old share)."""
        preemptor, target = self._almost_lcas(cq_name)
        return drs(self._search.state, preemptor), drs(self._search.state, target)

    def share_without(self, cq_name: str, workload: Workload) -> DRS:
        """Kueue `ComputeTargetShareAfterRemoval`."""
        state = self._search.state
        state.release(workload.key)
        try:
            return drs(state, self._almost_lcas(cq_name)[1])
        finally:
            state.hold(workload)
