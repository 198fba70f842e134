"""Fair sharing arithmetic: Dominant Resource Share and admission fair sharing usage.

DRS follows Kueue's `pkg/cache/scheduler/fair_sharing.go`: a ClusterQueue or Cohort's share
is, over resources, the largest ratio of what it borrows above its subtree quota to what its
parent's whole tree could lend it (per-mille), divided by its `fairSharing.weight`. A node
that borrows nothing has share 0; one with weight 0 that borrows has an infinite share.

Admission fair sharing (Kueue `pkg/util/admissionfairsharing`): a LocalQueue's usage is the
weighted sum of its decayed consumed resources divided by the LocalQueue's weight.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from scheduler.model import AdmissionFairSharing, FlavorResource, Snapshot, Workload
from scheduler.quota import NodeKey
from scheduler.state import ClusterState


@dataclass(frozen=True, slots=True)
class DRS:
    """Kueue's `DRS`: a node's dominant resource share, compared with `compare`."""

    weight: float
    ratio: float
    """Unweighted: borrowed / lendable of the dominant resource, times 1000."""
    resource: str = ""
    borrowed: frozenset[FlavorResource] = frozenset()
    """The (flavor, resource) pairs on which the node uses more than its subtree quota."""

    @property
    def borrowing(self) -> bool:
        return bool(self.borrowed)

    def borrowing_on(self, frs: Mapping[FlavorResource, int]) -> bool:
        """Kueue `IsBorrowingOn`: it borrows on one of the pairs a request asks for."""
        return any(frs.get(fr, 0) > 0 for fr in self.borrowed)

    @property
    def share(self) -> float:
        """Kueue `PreciseWeightedShare`."""
        if self.ratio == 0:
            return 0.0
        if self.weight == 0:
            return math.inf
        return self.ratio / self.weight

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight == 0 and self.ratio != 0


NEGATIVE = DRS(1.0, -1.0)
"""Kueue `NegativeDRS`: below every real share, a starting point for maxima."""


def compare(a: DRS, b: DRS) -> int:
    """Kueue `CompareDRS`: -1 when `a` should be admitted first (or preempted last)."""
    if a.zero_weight_borrows and b.zero_weight_borrows:
        return _cmp(a.ratio, b.ratio)
    if a.zero_weight_borrows:
        return 1
    if b.zero_weight_borrows:
        return -1
    return _cmp(a.share, b.share)


def _cmp(a: float, b: float) -> int:
    return (a > b) - (a < b)


def weight(state: ClusterState, key: NodeKey) -> float:
    """A node's `fairSharing.weight`; a cohort named only by its members weighs 1."""
    kind, name = key
    if kind == "cq":
        return state.cluster_queues[name].fair_weight
    cohort = state.cohorts.get(name)
    return cohort.fair_weight if cohort is not None else 1.0


def drs(state: ClusterState, key: NodeKey) -> DRS:
    """Kueue `dominantResourceShare` of a ClusterQueue or Cohort at the state's usage."""
    tree = state.tree
    result = DRS(weight(state, key), 0.0)
    parent = tree.parent(key)
    if parent is None:
        return result
    borrowing: dict[str, int] = {}
    borrowed = []
    for fr in tree.subtree_frs(key):
        amount = tree.usage(key, fr) - tree.subtree_quota(key, fr)
        if amount > 0:
            borrowing[fr[1]] = borrowing.get(fr[1], 0) + amount
            borrowed.append(fr)
    if not borrowing:
        return result
    lendable: dict[str, int] = {}
    for fr in tree.subtree_frs(tree.root(parent)):
        lendable[fr[1]] = lendable.get(fr[1], 0) + tree.potential_available(parent, fr)
    ratio, dominant = 0.0, ""
    for resource, amount in borrowing.items():
        if lendable.get(resource, 0) > 0:
            value = amount * 1000 / lendable[resource]
            # Alphabetical order breaks ties, as in Kueue, so the name is deterministic.
            if value > ratio or (value == ratio and resource < dominant):
                ratio, dominant = value, resource
    return DRS(result.weight, ratio, dominant, frozenset(borrowed))


@dataclass(frozen=True, slots=True)
class Shares:
    """Every ClusterQueue's and Cohort's weighted share (what Kueue reports in
    `status.fairSharing.weightedShare`, unrounded)."""

    cluster_queues: dict[str, float]
    cohorts: dict[str, float]


def shares(snapshot: Snapshot) -> Shares:
    """The share of every ClusterQueue and Cohort at the snapshot's usage."""
    state = ClusterState(snapshot)
    cqs: dict[str, float] = {}
    cohorts: dict[str, float] = {}
    for key in state.tree.nodes():
        target = cqs if key[0] == "cq" else cohorts
        target[key[1]] = drs(state, key).share
    return Shares(cqs, cohorts)


# -- admission fair sharing --------------------------------------------------------------------


def alpha(elapsed: float, half_life: float) -> float:
    """Kueue `calculateAlphaRate`: the weight of new usage after `elapsed` seconds."""
    if half_life == 0:
        return 0.0
    return 1.0 - math.pow(0.5, elapsed / half_life)


def local_queue_usage(
    consumed: Mapping[str, float], lq_weight: float, config: AdmissionFairSharing
) -> float:
    """Kueue `CalculateUsage`: resource-weighted consumption over the LocalQueue's weight
    (infinite when that weight is not positive, so the queue sorts last)."""
    total = sum(
        config.resource_weights.get(name, 1.0) * consumed[name] for name in sorted(consumed)
    )
    if lq_weight <= 0:
        return math.inf
    return total / lq_weight


def total_requests(workload: Workload) -> dict[str, float]:
    """What a workload asks for in all (its admitted counts once it has some), in Kubernetes
    units (cores, bytes) as Kueue's `SumTotalRequests` reads quantities."""
    counts = {ps.name: ps.count for ps in workload.pod_sets}
    if workload.admission is not None:
        counts.update({psa.name: psa.count for psa in workload.admission.pod_sets})
    totals: dict[str, float] = {}
    for pod_set in workload.pod_sets:
        for name, amount in pod_set.requests.items():
            totals[name] = totals.get(name, 0.0) + amount * counts[pod_set.name] / 1000
    return totals


def entry_penalty(workload: Workload, lq_weight: float, config: AdmissionFairSharing) -> float:
    """Kueue `CalculateEntryPenalty`, as usage: what admitting `workload` adds to its
    LocalQueue's usage until the next sample folds it into the consumed history."""
    rate = alpha(config.usage_sampling_interval, config.usage_half_life_time)
    penalty = {name: value * rate for name, value in total_requests(workload).items()}
    return local_queue_usage(penalty, lq_weight, config)


# -- the fair sharing iterator -----------------------------------------------------------------

E = TypeVar("E")


class Tournament(Generic[E]):
    """Kueue `fairSharingIterator`: the order in which a cycle processes its entries.

    Each `pop` takes a remaining entry's cohort tree and runs a tournament down it: at every
    Cohort, the child whose share, with its nominated workload admitted, is lowest wins
    (`entryComparer.less`: not borrowing on the requested pairs first, gate
    FairSharingPrioritizeNonBorrowing; then share; then priority; then queue time). Shares are
    computed at each pop, so every admission of the cycle counts for the next one. Kueue
    picks among cohort trees in map order; here the first remaining entry in `order` does.
    """

    def __init__(
        self,
        state: ClusterState,
        entries: list[E],
        cq_name: Callable[[E], str],
        usage: Callable[[E], Mapping[FlavorResource, int]],
        order: Callable[[E], tuple[Any, ...]],
    ):
        self._state = state
        self._cq_name, self._usage, self._order = cq_name, usage, order
        self._by_cq: dict[str, E] = {cq_name(e): e for e in entries}

    def __iter__(self) -> Iterator[E]:
        while self._by_cq:
            yield self._pop()

    def _pop(self) -> E:
        first = min(self._by_cq.values(), key=self._order)
        name = self._cq_name(first)
        node = self._state.tree.cq(name)
        if self._state.tree.parent(node) is None:
            return self._by_cq.pop(name)
        values = self._compute_shares(self._state.tree.root(node))
        winner = self._run(self._state.tree.root(node), values)
        assert winner is not None
        return self._by_cq.pop(self._cq_name(winner))

    def _compute_shares(self, root: NodeKey) -> dict[tuple[NodeKey, str], DRS]:
        """Kueue `computeDRS`: for each entry, the share of each node on its path to the root
        with the entry admitted, keyed by that node's parent."""
        tree = self._state.tree
        values: dict[tuple[NodeKey, str], DRS] = {}
        for name, entry in self._by_cq.items():
            node = tree.cq(name)
            if tree.root(node) != root:
                continue
            usage = self._usage(entry)
            tree.add(node, usage)
            share = drs(self._state, node)
            for ancestor in tree.ancestors(node):
                values[(ancestor, name)] = share
                share = drs(self._state, ancestor)
            tree.remove(node, usage)
        return values

    def _run(self, cohort: NodeKey, values: dict[tuple[NodeKey, str], DRS]) -> E | None:
        """Kueue `runTournament`: the entry each Cohort nominates, bubbling up to the root."""
        candidates: list[E] = []
        children = sorted(self._state.tree.children(cohort))  # cohorts before queues
        for child in children:
            if child[0] == "cohort":
                found = self._run(child, values)
                if found is not None:
                    candidates.append(found)
            elif child[1] in self._by_cq:
                candidates.append(self._by_cq[child[1]])
        if not candidates:
            return None
        best = candidates[0]
        for current in candidates[1:]:
            if self._less(current, best, cohort, values):
                best = current
        return best

    def _less(self, a: E, b: E, cohort: NodeKey, values: dict[tuple[NodeKey, str], DRS]) -> bool:
        a_drs, b_drs = values[(cohort, self._cq_name(a))], values[(cohort, self._cq_name(b))]
        a_borrows = a_drs.borrowing_on(self._usage(a))
        b_borrows = b_drs.borrowing_on(self._usage(b))
        if a_borrows != b_borrows:
            return not a_borrows
        by_share = compare(a_drs, b_drs)
        if by_share:
            return by_share < 0
        return self._order(a) < self._order(b)
