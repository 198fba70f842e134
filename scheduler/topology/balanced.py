"""Kueue's balanced placement (gate TASBalancedPlacement, alpha since v0.15, off by default;
`pkg/cache/scheduler/tas_balanced_placement.go`): for a `preferred` request that fits below
one domain of the level above the preferred one, spread the slices evenly over the fewest
domains instead of packing them greedily (12 pods on two hosts of 10: 6 + 6, not 10 + 2).

Leaders are not modelled here: a podset group is placed as one PodSet of the group's pods
(see workload.py), so Kueue's leader reservation does not apply."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.topology.domains import Counts, Domain, Plan, sort_domains


@dataclass(slots=True)
class _Candidate:
    """A domain at the preferred level with its children, pruned (Kueue `cloneDomains`)."""

    domain: Domain
    children: list[Domain]


def balanced_domains(counts: Counts, plan: Plan) -> tuple[int, list[Domain]] | None:
    """Kueue `findBestDomainsForBalancedPlacement` then `applyBalancedPlacementAlgorithm`:
    the level and its domains with the slices they get; None to fall back to BestFit."""
    best = _best_candidates(counts, plan)
    if best is None:
        return None
    threshold, candidates = best
    if plan.level < plan.slice_level:
        chosen = _optimal_set(
            [c.domain for c in candidates], plan, key=_capacity_then_entropy(candidates)
        )
        if chosen is None:
            return None
        picked = {id(d) for d in chosen}
        current = [ch for c in candidates if id(c.domain) in picked for ch in c.children]
        level = plan.level + 1
    else:
        current, level = [c.domain for c in candidates], plan.level
    spread = _spread(current, plan, threshold)
    return None if spread is None else (level, spread)


def _best_candidates(counts: Counts, plan: Plan) -> tuple[int, list[_Candidate]] | None:
    """The siblings under one domain of the level above the preferred one (all of the top
    level when it is preferred) that give the highest balance threshold (the most slices
    every used domain one level down can get), then the fewest domains at the preferred
    level; None when no such group fits the request with a threshold above 0."""
    if plan.level == 0:
        groups = [counts.domains(0)]
    else:
        groups = [counts.children(parent) for parent in counts.domains(plan.level - 1)]
    need = plan.slices
    best: tuple[int, int, list[_Candidate]] | None = None
    for group in groups:
        candidates = [_Candidate(d, counts.children(d)) for d in group]
        below = plan.level < plan.slice_level
        lower = [ch for c in candidates for ch in c.children] if below else group
        used = _greedy_use(lower, need)
        if used is None:
            continue
        threshold = min(need // len(used), used[-1].slices)
        if threshold <= 0 or (best is not None and threshold < best[0]):
            continue
        _prune(candidates, threshold, plan)
        at_level = _greedy_use([c.domain for c in candidates], need)
        if at_level is None:
            continue
        if best is None or threshold > best[0] or len(at_level) < best[1]:
            best = (threshold, len(at_level), candidates)
    return None if best is None else (best[0], best[2])


def _greedy_use(domains: Sequence[Domain], need: int) -> list[Domain] | None:
    """Kueue `evaluateGreedyAssignment`: the domains, most slices first, that BestFit's
    packing would use for `need` slices; None when they do not hold them."""
    used: list[Domain] = []
    remaining = need
    for domain in sort_domains(domains, least_free=False):
        if remaining <= 0 or domain.slices <= 0:
            break
        used.append(domain)
        remaining -= domain.slices
    return used if remaining <= 0 else None


def _prune(candidates: list[_Candidate], threshold: int, plan: Plan) -> None:
    """Kueue `pruneDomainsBelowThreshold`: children with fewer slices than the threshold are
    dropped, each candidate's counts summed again from the rest, and dropped in turn if it
    falls below the threshold."""
    for candidate in candidates:
        domain = candidate.domain
        for child in candidate.children:
            if child.slices < threshold:
                child.pods = child.slices = 0
        if candidate.children:  # a leaf keeps its own counts (Kueue `fillInCountsHelper`)
            domain.pods = sum(ch.pods for ch in candidate.children)
            if domain.level == plan.slice_level:
                domain.slices = domain.pods // plan.slice_size
            else:
                domain.slices = sum(ch.slices for ch in candidate.children)
        if domain.slices < threshold:
            domain.pods = domain.slices = 0
            for child in candidate.children:
                child.pods = child.slices = 0


def _optimal_set(
    domains: Sequence[Domain], plan: Plan, key: Callable[[Domain], Any]
) -> list[Domain] | None:
    """Kueue `selectOptimalDomainSetToFit`: among the sets of as many domains as the greedy
    packing uses, the first (in `key` order) with the least capacity that holds the request."""
    greedy = _greedy_use(domains, plan.slices)
    if greedy is None:
        return None
    size = len(greedy)
    # by_left[i]: pods still to place -> the first set of i domains that leaves that many
    by_left: list[dict[int, list[Domain]]] = [{} for _ in range(size + 1)]
    by_left[0][plan.count] = []
    for domain in sorted(domains, key=key):
        if domain.slices <= 0:
            continue
        for i in range(size, 0, -1):
            for left in sorted(by_left[i - 1]):
                if left > 0:
                    by_left[i].setdefault(left - domain.pods, [*by_left[i - 1][left], domain])
    covered = [left for left in by_left[size] if left <= 0]
    return by_left[size][max(covered)] if covered else None


def _capacity_then_entropy(candidates: Sequence[_Candidate]) -> Callable[[Domain], Any]:
    """Kueue `compareDomainCapacityAndEntropy`: most slices, then the most even spread of
    pods over the children (Shannon entropy), then level values."""
    children = {id(c.domain): c.children for c in candidates}
    return lambda d: (-d.slices, -_entropy(children[id(d)]), d.path)


def _entropy(domains: Sequence[Domain]) -> float:
    total = sum(d.pods for d in domains)
    if total == 0:
        return 0.0
    return -sum(d.pods / total * math.log2(d.pods / total) for d in domains if d.pods > 0)


def _spread(domains: Sequence[Domain], plan: Plan, threshold: int) -> list[Domain] | None:
    """Kueue `placeSlicesOnDomainsBalanced`: the optimal set by level values, each domain
    given the threshold, the remaining slices to the largest first."""
    chosen = _optimal_set(domains, plan, key=lambda d: d.path)
    if chosen is None or plan.slices < len(chosen) * threshold:
        return None
    extra = plan.slices - len(chosen) * threshold
    result = sort_domains(chosen, least_free=False)
    for domain in result:
        take = min(domain.slices - threshold, extra)
        domain.slices = threshold + take
        domain.pods = domain.slices * plan.slice_size
        extra -= take
    return None if extra > 0 else result
