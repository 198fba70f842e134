"""Which ClusterQueues, flavors and PodSets Topology Aware Scheduling applies to."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.model import ClusterQueue, PodSet, ResourceFlavor
from scheduler.topology.values import Topology, TopologyRequest, level_key


def is_tas_only(
    cq: ClusterQueue, flavors: Mapping[str, ResourceFlavor], topologies: Mapping[str, Topology]
) -> bool:
    """Kueue `isTASOnly`: every flavor of the queue has a known topology (vacuously true for a
    queue without flavors). PodSets there get an implied request."""
    return all(
        f.name in flavors and flavors[f.name].topology_name in topologies
        for group in cq.resource_groups
        for f in group.flavors
    )


def requests_topology(pod_set: PodSet, tas_only: bool) -> bool:
    """Kueue `isTASRequested`: explicit annotations, or implied in a TAS-only ClusterQueue."""
    return pod_set.topology_request is not None or tas_only


def flavor_mismatch(
    pod_set: PodSet,
    flavor: ResourceFlavor,
    topology: Topology | None,
    tas_only: bool,
    covered: Iterable[str] = (),
) -> str | None:
    """Kueue `checkPodSetAndFlavorMatchForTAS`: why `flavor` cannot serve this PodSet's
    resources (`covered`: the resource group's resources), or None.

    `topology` is the flavor's Topology object (None when it has none or it is missing)."""
    request = pod_set.topology_request
    if request is None and tas_only:
        return None  # implied: any flavor of a TAS-only queue will do
    if request is None:
        if flavor.topology_name is not None:
            return f'Flavor "{flavor.name}" supports only TopologyAwareScheduling'
        return None
    if flavor.topology_name is None:
        if not any(pod_set.requests.get(r, 0) for r in covered):
            return None
        return f'Flavor "{flavor.name}" does not support TopologyAwareScheduling'
    if topology is None:
        return f'Flavor "{flavor.name}" information missing in TAS cache'
    if not has_level(topology, request):
        return f'Flavor "{flavor.name}" does not contain the requested level'
    return None


def has_level(topology: Topology, request: TopologyRequest) -> bool:
    """Kueue `HasLevel`: the request's level and slice level both exist in the topology."""
    key = level_key(request, topology.levels)
    slice_key = request.slice_level or (topology.levels[-1] if topology.levels else None)
    return key in topology.levels and slice_key in topology.levels
