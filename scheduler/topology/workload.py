"""Whole workloads: every TAS PodSet of a workload placed in turn (groups together), and what
an assignment takes on the nodes or whether it still fits there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from scheduler.model import PodSet, PodSetAssignment, ResourceFlavor
from scheduler.placement import Node
from scheduler.topology.assignment import place_pod_set
from scheduler.topology.eligibility import requests_topology
from scheduler.topology.tree import NodeIndex, indexed
from scheduler.topology.usage import Usage, add_usage, per_pod, pods_fitting
from scheduler.topology.values import Placement, Topology, TopologyAssignment


def node_usage(
    assignment: TopologyAssignment, pod_set: PodSet, nodes: Sequence[Node]
) -> dict[str, dict[str, int]]:
    """What an assignment takes on each node (its requests and `pods`), for `used`.

    A domain above the hostname is charged to its first node by name: only the domain's
    total matters, as Kueue counts capacity per lowest-level domain. Domains whose nodes are
    gone are skipped, as Kueue skips their usage."""
    first_names = indexed(nodes).first_names(assignment.levels)
    usage: dict[str, dict[str, int]] = {}
    requests = per_pod(pod_set)
    for domain in assignment.domains:
        name = first_names.get(domain.values)
        if name is None:
            continue
        node_used = usage.setdefault(name, {})
        for resource, amount in requests.items():
            node_used[resource] = node_used.get(resource, 0) + amount * domain.count
    return usage


def assignment_fits(
    assignment: TopologyAssignment,
    pod_set: PodSet,
    nodes: Sequence[Node],
    used: Usage,
    flavor: ResourceFlavor,
) -> bool:
    """Kueue `TASFlavorSnapshot.Fits`: every domain of an existing assignment still has room
    for its pods at `used` (e.g. after other workloads were admitted in the same cycle)."""
    return _still_fits(indexed(nodes), assignment, pod_set, flavor, used, {})


def _still_fits(
    index: NodeIndex,
    assignment: TopologyAssignment,
    pod_set: PodSet,
    flavor: ResourceFlavor,
    *usages: Usage,
) -> bool:
    domains = index.in_flavor(assignment.levels, flavor)
    requests = per_pod(pod_set)
    return all(
        d.values in domains and pods_fitting(domains[d.values], requests, *usages) >= d.count
        for d in assignment.domains
    )


def placements_fit(
    pod_sets: Sequence[PodSet],
    assignments: Sequence[PodSetAssignment],
    flavors: Mapping[str, ResourceFlavor],
    nodes: Sequence[Node],
    used: Usage,
) -> bool:
    """`assignment_fits` for every PodSetAssignment that carries a topology assignment, each
    PodSet seeing what the earlier ones take."""
    by_name = {ps.name: ps for ps in pod_sets}
    index = indexed(nodes)
    assumed: dict[str, dict[str, int]] = {}
    for a in assignments:
        flavor = _tas_flavor(a, flavors)
        if a.topology_assignment is None or flavor is None:
            continue
        pod_set = by_name[a.name]
        if not _still_fits(index, a.topology_assignment, pod_set, flavor, used, assumed):
            return False
        assumed = add_usage(assumed, node_usage(a.topology_assignment, pod_set, index))
    return True


def place_workload(
    pod_sets: Sequence[PodSet],
    assignments: Sequence[PodSetAssignment],
    flavors: Mapping[str, ResourceFlavor],
    topologies: Mapping[str, Topology],
    nodes: Sequence[Node],
    used: Usage,
    tas_only: bool = False,
    *,
    balanced: bool = False,
) -> dict[str, Placement]:
    """Kueue `FindTopologyAssignmentsForWorkload`: place every PodSet that requests TAS on
    its assigned TAS flavor, each seeing what the earlier ones took (assumed usage). The
    PodSets of one `podset-group-name` are placed together, as one unit.

    Returns a Placement per such PodSet, in PodSet order, stopping after the first unit that
    does not fit. Pass non-TAS usage only as `used` to simulate an empty topology; `balanced`
    is Kueue's TASBalancedPlacement gate."""
    by_name = {ps.name: ps for ps in pod_sets}
    members = [
        (by_name[a.name], a)
        for a in assignments
        if requests_topology(by_name[a.name], tas_only) and a.count > 0
    ]
    result: dict[str, Placement] = {}
    assumed: dict[str, dict[str, int]] = {}
    units = _placement_units(members)
    for number, unit in enumerate(units, 1):
        total = add_usage(used, assumed) if assumed else used
        placements = _place_unit(unit, flavors, topologies, nodes, total, balanced)
        result.update(placements)
        placed = [(pod_set, placements[pod_set.name].assignment) for pod_set, _ in unit]
        if any(assignment is None for _, assignment in placed):
            return result
        if number < len(units):  # what this unit takes matters only to the units after it
            assumed = add_usage(
                assumed, *(node_usage(a, pod_set, nodes) for pod_set, a in placed if a)
            )
    return result


_Member = tuple[PodSet, PodSetAssignment]


def _placement_units(members: Sequence[_Member]) -> list[list[_Member]]:
    """Each PodSet alone, except that a group's PodSets form one unit where its first is."""
    units: list[list[_Member]] = []
    groups: dict[str, list[_Member]] = {}
    for member in members:
        request = member[0].topology_request
        group = request.group if request is not None else None
        if group is None:
            units.append([member])
        elif group in groups:
            groups[group].append(member)
        else:
            groups[group] = [member]
            units.append(groups[group])
    return units


def _place_unit(
    unit: list[_Member],
    flavors: Mapping[str, ResourceFlavor],
    topologies: Mapping[str, Topology],
    nodes: Sequence[Node],
    used: Usage,
    balanced: bool,
) -> dict[str, Placement]:
    flavor = _unit_flavor(unit, flavors)
    if isinstance(flavor, str):
        return {pod_set.name: Placement(None, flavor) for pod_set, _ in unit}
    topology = topologies.get(flavor.topology_name or "")
    if topology is None:
        reason = f"topology {flavor.topology_name} not found"
        return {pod_set.name: Placement(None, reason, flavor.name) for pod_set, _ in unit}
    if len(unit) == 1:
        pod_set, assignment = unit[0]
        placement = place_pod_set(
            topology, nodes, used, flavor, pod_set, assignment.count, balanced=balanced
        )
        return {pod_set.name: placement}
    return _place_group(unit, topology, nodes, used, flavor, balanced)


def _unit_flavor(
    unit: list[_Member], flavors: Mapping[str, ResourceFlavor]
) -> ResourceFlavor | str:
    """The one TAS flavor of the unit's PodSets, or why there is none."""
    names: set[str] = set()
    for pod_set, assignment in unit:
        found = _tas_flavor_names(assignment, flavors)
        if len(found) != 1:
            problem = "no TAS flavor assigned" if not found else f"multiple TAS flavors {found}"
            return f"PodSet {pod_set.name}: {problem}"
        names.update(found)
    if len(names) > 1:
        return f"PodSet group {_group_of(unit)}: different TAS flavors {sorted(names)}"
    return flavors[names.pop()]


def _group_of(unit: list[_Member]) -> str | None:
    request = unit[0][0].topology_request
    return request.group if request is not None else None


def _place_group(
    unit: list[_Member],
    topology: Topology,
    nodes: Sequence[Node],
    used: Usage,
    flavor: ResourceFlavor,
    balanced: bool,
) -> dict[str, Placement]:
    """Kueue's grouped placement: a leader of one pod and its workers go into one domain at
    the workers' requested level as a single PodSet whose pod count is the group's. Every pod
    is sized for the larger of the two requests (exact when they ask for the same); the
    leader takes one pod of the first domain."""
    (leader, lead), (workers, work) = _leader_and_workers(unit)
    if len(unit) != 2 or lead.count != 1:
        reason = f"PodSet group {_group_of(unit)}: needs one leader pod and one workers PodSet"
        return {pod_set.name: Placement(None, reason, flavor.name) for pod_set, _ in unit}
    together = replace(workers, requests=_larger(leader.requests, workers.requests))
    count = lead.count + work.count
    placement = place_pod_set(topology, nodes, used, flavor, together, count, balanced=balanced)
    if placement.assignment is None:
        return {pod_set.name: placement for pod_set, _ in unit}
    first, *others = placement.assignment.domains
    levels = placement.assignment.levels
    rest = (replace(first, count=first.count - 1),) if first.count > 1 else ()
    split = {
        leader.name: TopologyAssignment(levels, (replace(first, count=1),)),
        workers.name: TopologyAssignment(levels, (*rest, *others)),
    }
    return {pod_set.name: Placement(split[pod_set.name], "", flavor.name) for pod_set, _ in unit}


def _leader_and_workers(unit: list[_Member]) -> tuple[_Member, _Member]:
    """Kueue `findLeaderAndWorkers`: the second PodSet leads unless it has more pods."""
    first, second = unit[0], unit[-1]
    return (first, second) if second[1].count > first[1].count else (second, first)


def _larger(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {r: max(a.get(r, 0), b.get(r, 0)) for r in {*a, *b}}


def _tas_flavor_names(
    assignment: PodSetAssignment, flavors: Mapping[str, ResourceFlavor]
) -> list[str]:
    """Kueue `onlyTASFlavor`: the flavors with a topology among those assigned."""
    return sorted(
        {f for f in assignment.flavors.values() if f in flavors and flavors[f].topology_name}
    )


def _tas_flavor(
    assignment: PodSetAssignment, flavors: Mapping[str, ResourceFlavor]
) -> ResourceFlavor | None:
    names = _tas_flavor_names(assignment, flavors)
    return flavors[names[0]] if len(names) == 1 else None


def topology_frs(
    pod_sets: Sequence[PodSet], assignments: Sequence[PodSetAssignment], tas_only: bool = False
) -> set[tuple[str, str]]:
    """Every (flavor, resource) of the PodSets that request TAS: Kueue turns all of them into
    Preempt when a placement needs preemption (`updateModeForTASRequests`), so they are the
    contested resources whose users may be preempted."""
    by_name = {ps.name: ps for ps in pod_sets}
    return {
        (flavor, resource)
        for a in assignments
        if requests_topology(by_name[a.name], tas_only) and a.count > 0
        for resource, flavor in a.flavors.items()
    }
