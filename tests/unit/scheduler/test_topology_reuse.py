"""What TAS placement keeps between placements and passes must not change what it decides:
trees shared by the passes over one tuple of nodes, capacity started from the idle counts,
and placements kept while no count changes."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler import Node, PodSet, ResourceFlavor
from scheduler.topology import (
    HOSTNAME,
    LiveUsage,
    NodeIndex,
    Topology,
    TopologyRequest,
    TopologyUsage,
    per_pod,
    place_pod_set,
)
from scheduler.topology.tree import Capacity, Tree
from scheduler.topology.usage import Usage, pods_fitting
from tests.unit.scheduler.builders import CPU

BLOCK, RACK = "block", "rack"
LEVELS = (BLOCK, RACK, HOSTNAME)
TOPOLOGY = Topology("default", LEVELS)
FLAVOR = ResourceFlavor("tas", {"pool": "tas"}, topology_name="default")


def host(name: str, rack: str, cpu: int = 4, pool: str = "tas") -> Node:
    labels = {BLOCK: "b1", RACK: rack, HOSTNAME: name, "pool": pool}
    return Node(name, labels, (), {"cpu": cpu * CPU, "pods": 110_000})


NODES = (
    *(host(f"x{i}", "r1") for i in range(4)),
    *(host(f"y{i}", "r2", cpu=2) for i in range(3)),
    host("z0", "r3", cpu=8),
    host("other", "r1", pool="cpu"),
)


def pod_set(count: int, cpu: float = 1, level: str = RACK) -> PodSet:
    return PodSet("main", count, {"cpu": int(cpu * CPU)}, topology_request=TopologyRequest(level))


def from_scratch(tree: Tree, requests: Mapping[str, int], used: Usage) -> list[list[int]]:
    """Every leaf counted at `used` and summed up the tree, as without any reuse."""
    pods = [[0] * len(paths) for paths in tree.paths]
    for nodes, ancestors in zip(tree.leaf_nodes, tree.ancestors, strict=True):
        fit = pods_fitting(nodes, requests, used)
        for level, index in enumerate(ancestors):
            pods[level][index] += fit
    return pods


def cpu(millis: int) -> dict[str, int]:
    return {"cpu": millis, "pods": 1000}


def test_indexes_over_one_tuple_of_nodes_share_trees_but_not_capacities():
    first, second, copy = NodeIndex(NODES), NodeIndex(NODES), NodeIndex(list(NODES))
    tree = first.tree(LEVELS, FLAVOR, pod_set(1))
    assert second.tree(LEVELS, FLAVOR, pod_set(1)) is tree
    assert copy.tree(LEVELS, FLAVOR, pod_set(1)) is not tree
    used = LiveUsage()
    requests = per_pod(pod_set(1))
    assert first.capacity(tree, used, requests) is not second.capacity(tree, used, requests)


def test_capacity_from_the_idle_counts_matches_a_count_from_scratch():
    tree = NodeIndex(NODES).tree(LEVELS, FLAVOR, pod_set(1))
    usages: list[Usage] = [
        {},
        {"x1": cpu(3000), "y2": cpu(2000)},
        {"z0": cpu(7500), "other": cpu(1000), "gone": cpu(1000)},
        {"x0": {}},
        LiveUsage({"x3": cpu(1000), "y0": cpu(500)}),
    ]
    for cpus in (0.5, 1, 3):
        requests = per_pod(pod_set(1, cpus))
        for used in usages:
            assert Capacity(tree, requests, used).pods == from_scratch(tree, requests, used)
    assert tree.idle_pods(per_pod(pod_set(1))) == from_scratch(tree, per_pod(pod_set(1)), {})


def test_a_kept_placement_holds_until_a_count_changes():
    index, usage = NodeIndex(NODES), TopologyUsage()
    used = usage.used()

    def placed(count: int) -> object:
        return place_pod_set(TOPOLOGY, index, used, FLAVOR, pod_set(count), count)

    def fresh(count: int) -> object:
        plain = {name: dict(amounts) for name, amounts in used.items()}
        return place_pod_set(TOPOLOGY, list(NODES), plain, FLAVOR, pod_set(count), count)

    first = placed(4)
    assert placed(4) is first
    usage.hold("elsewhere", {"other": cpu(4000)})  # a node no domain holds: counts unchanged
    assert placed(4) is first
    usage.hold("a", {"y0": cpu(2000), "y1": cpu(2000)})  # the tightest rack is now z0's
    second = placed(4)
    assert second != first
    assert second == fresh(4)
    usage.hold("b", {"z0": cpu(8000), "x0": cpu(1000)})  # then one free host of r1
    assert placed(4) not in (first, second)
    assert placed(4) == fresh(4)
    assert placed(2) == fresh(2)
    usage.release("a")
    usage.release("b")
    assert placed(4) == first == fresh(4)
    assert placed(8) == fresh(8)
