"""Where in a Topology the pods of one PodSet go: Kueue `findTopologyAssignment`
(`pkg/cache/scheduler/tas_flavor_snapshot.go`)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from scheduler.model import PodSet, ResourceFlavor
from scheduler.placement import Node
from scheduler.topology.balanced import balanced_domains
from scheduler.topology.domains import Counts, Domain, Plan, sort_domains
from scheduler.topology.tree import indexed
from scheduler.topology.usage import Usage, per_pod
from scheduler.topology.values import (
    HOSTNAME,
    IMPLIED,
    DomainAssignment,
    Placement,
    Topology,
    TopologyAssignment,
    TopologyRequest,
    level_key,
)


def find_assignment(
    topology: Topology,
    nodes: Sequence[Node],
    used: Usage,
    flavor: ResourceFlavor,
    pod_set: PodSet,
    count: int,
) -> TopologyAssignment | None:
    """Where `count` pods of `pod_set` go on `flavor`'s nodes; None when they cannot be placed.

    `used` is what admitted TAS workloads and non-TAS pods already take on each node. A PodSet
    without a topology request is placed as Kueue's implied (unconstrained) request: call this
    only for PodSets that `requests_topology`."""
    return place_pod_set(topology, nodes, used, flavor, pod_set, count).assignment


def assignment_fits_empty(
    topology: Topology,
    nodes: Sequence[Node],
    non_tas_used: Usage,
    flavor: ResourceFlavor,
    pod_set: PodSet,
    count: int,
) -> bool:
    """Whether the PodSet could be placed once every TAS workload is gone (Kueue's
    simulateEmpty): if not, preemption cannot help and the assignment is NoFit."""
    return place_pod_set(topology, nodes, non_tas_used, flavor, pod_set, count).fits


def place_pod_set(
    topology: Topology,
    nodes: Sequence[Node],
    used: Usage,
    flavor: ResourceFlavor,
    pod_set: PodSet,
    count: int,
    *,
    balanced: bool = False,
) -> Placement:
    """`find_assignment` with Kueue's reason when there is no assignment; `balanced` is
    Kueue's TASBalancedPlacement gate (scheduler/topology/balanced.py)."""
    plan = _plan(topology, pod_set.topology_request, count, balanced)
    if isinstance(plan, str):
        return Placement(None, plan, flavor.name)
    if count == 0:
        return Placement(_assignment(topology, []), "", flavor.name)
    index = indexed(nodes)
    tree = index.tree(topology.levels, flavor, pod_set)
    capacity = index.capacity(tree, used, per_pod(pod_set))
    key = (plan, flavor.name)
    if key not in capacity.placements:
        capacity.placements[key] = _place(topology, Counts(tree, capacity, plan), flavor)
    return capacity.placements[key]


def _place(topology: Topology, counts: Counts, flavor: ResourceFlavor) -> Placement:
    """The placement at these counts: level selection (or balanced spread), then descent."""
    plan = counts.plan
    spread = balanced_domains(counts, plan) if plan.balanced else None
    if spread is not None:
        fit_level, domains = spread
        leaves = _split_down(counts, domains, fit_level, plan)
        return Placement(_assignment(topology, leaves), "", flavor.name)
    chosen = _select(counts, plan, plan.level)
    if isinstance(chosen, str):
        return Placement(None, chosen, flavor.name)
    fit_level, domains = chosen
    leaves = _descend(counts, domains, fit_level, plan)
    return Placement(_assignment(topology, leaves), "", flavor.name)


@functools.lru_cache(maxsize=4096)  # pure, and asked alike for every nomination of a shape
def _plan(
    topology: Topology, request: TopologyRequest | None, count: int, balanced: bool
) -> Plan | str:
    levels = topology.levels
    if request is None:
        request = IMPLIED
    key = level_key(request, levels)
    if key is None:
        return "topology level not specified"
    if key not in levels:
        return f"no requested topology level: {key}"
    slice_key = request.slice_level or levels[-1]
    if slice_key not in levels:
        return f"no requested topology level for slices: {slice_key}"
    level, slice_level = levels.index(key), levels.index(slice_key)
    if level > slice_level:
        return f"podset slice topology {slice_key} is above the podset topology {key}"
    size = 1 if request.slice_level is None else (request.slice_size or 0)
    if size < 1:
        return "slice topology requested, but slice size not provided"
    if count % size:
        return f"pod count {count} is not a multiple of the slice size {size}"
    required = request.required is not None
    least_free = request.unconstrained or request.slice_only
    balanced = balanced and not required and not least_free  # Kueue: preferred requests only
    return Plan(
        topology.name, levels, level, slice_level, size, count, required, least_free, balanced
    )


def _best_fit(domains: Sequence[Domain], need: int, by_slices: bool) -> Domain:
    """The first domain with the smallest capacity that still covers `need`."""
    fitting = [d for d in domains if (d.slices if by_slices else d.pods) >= need]
    if not fitting:
        return domains[0]
    return min(fitting, key=lambda d: d.slices if by_slices else d.pods)


def _select(counts: Counts, plan: Plan, level: int) -> tuple[int, list[Domain]] | str:
    """Kueue `findLevelWithFitDomains`: the level and the domains that hold every slice."""
    ordered = sort_domains(counts.domains(level), plan.least_free)
    if not ordered:
        return f"no topology domains at level: {plan.levels[level]}"
    need = plan.slices
    if plan.least_free:
        first = next((d for d in ordered if d.slices >= need), None)
        if first is not None:
            return level, [first]
    elif ordered[0].slices >= need:
        return level, [_best_fit(ordered, need, by_slices=True)]
    if plan.required:
        return plan.no_fit(ordered[0].slices)
    if level > 0 and not plan.least_free:
        return _select(counts, plan, level - 1)
    chosen = _greedy(ordered, need, plan.least_free)
    taken = sum(d.slices for d in chosen)
    return (level, chosen) if taken >= need else plan.no_fit(taken)


def _greedy(ordered: list[Domain], need: int, least_free: bool) -> list[Domain]:
    """Domains in order until they hold `need` slices; BestFit makes the last one tight."""
    chosen: list[Domain] = []
    remaining = need
    for index, domain in enumerate(ordered):
        if remaining <= 0:
            break
        if not least_free and domain.slices >= remaining:
            domain = _best_fit(ordered[index:], remaining, by_slices=True)
        chosen.append(domain)
        remaining -= domain.slices
    return chosen


def _take(
    domains: list[Domain], count: int, size: int, by_slices: bool, least_free: bool
) -> list[Domain]:
    """Kueue `updateCountsToMinimumGeneric` (no leaders): assign `count` pods to the fewest
    domains in order, in whole slices of `size` when `by_slices`; sets each domain's pods."""
    remaining = count // size if by_slices else count
    result: list[Domain] = []
    for index, domain in enumerate(domains):
        capacity = domain.slices if by_slices else domain.pods
        if not least_free and capacity >= remaining:
            domain = _best_fit(domains[index:], remaining, by_slices)
            capacity = domain.slices if by_slices else domain.pods
        taken = min(capacity, remaining)
        domain.pods = taken * size if by_slices else taken
        if by_slices:
            domain.slices = taken
        result.append(domain)
        remaining -= taken
        if remaining <= 0:
            return result
    raise AssertionError(f"capacity summed up the tree does not cover {count} pods")


def _descend(counts: Counts, domains: list[Domain], level: int, plan: Plan) -> list[Domain]:
    """Kueue phase 2b: from the chosen domains down to the leaves that get pods."""
    lf, leaf_level = plan.least_free, len(plan.levels) - 1
    current = _take(domains, plan.count, plan.slice_size, True, lf)
    while level < min(leaf_level, plan.slice_level):
        children = [c for d in current for c in counts.children(d)]
        current = _take(sort_domains(children, lf), plan.count, plan.slice_size, True, lf)
        level += 1
    return _split_down(counts, current, level, plan)


def _split_down(counts: Counts, current: list[Domain], level: int, plan: Plan) -> list[Domain]:
    """Kueue phase 2b per parent: each domain's pods go to its own children, in whole slices
    above the slice level (reached only by balanced placement), single pods below it."""
    lf = plan.least_free
    while level < len(plan.levels) - 1:
        size = plan.slice_size if level < plan.slice_level else 1
        current = [
            child
            for d in current
            for child in _take(sort_domains(counts.children(d), lf), d.pods, size, size > 1, lf)
        ]
        level += 1
    return current


def _assignment(topology: Topology, leaves: Iterable[Domain]) -> TopologyAssignment:
    """Kueue `buildAssignment`: leaves with pods, by label values; hostname only if lowest."""
    start = len(topology.levels) - 1 if topology.levels[-1:] == (HOSTNAME,) else 0
    domains = tuple(
        DomainAssignment(leaf.path[start:], leaf.pods)
        for leaf in sorted(leaves, key=lambda d: d.path)
        if leaf.pods > 0
    )
    return TopologyAssignment(topology.levels[start:], domains)
