"""The domains of a Topology over a snapshot's nodes, and the pods of each shape that fit in
them (Kueue `tas_topology_tree.go`, `tas_nodes_cache.go`)."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import overload

from scheduler.model import PodSet, ResourceFlavor
from scheduler.placement import Node, Pod, matches_node
from scheduler.topology.usage import LiveUsage, Usage, pods_fitting
from scheduler.topology.values import HOSTNAME, Placement

_IDLE_KEPT = 64
"""Pod shapes whose idle counts a tree keeps."""
_TREES_KEPT = 256
"""Trees (flavor and, at hostname level, pod filters) kept per fleet: teams choose selectors."""


class Tree:
    """The domains of a topology over the nodes one kind of pod may use: each level's label
    values in order, the children of each domain, and each leaf's nodes and ancestors."""

    def __init__(self, levels: tuple[str, ...], leaves: Mapping[tuple[str, ...], Sequence[Node]]):
        self.paths: list[list[tuple[str, ...]]] = [[] for _ in levels]
        self.children: list[list[list[int]]] = [[] for _ in levels]
        self.leaf_nodes: list[Sequence[Node]] = []
        self.ancestors: list[tuple[int, ...]] = []
        """Per leaf, its domain's index at every level (its own last)."""
        self.leaves_of: dict[str, list[int]] = {}
        for path in sorted(leaves):
            self._add_leaf(path, leaves[path])
        self._idle: dict[tuple[tuple[str, int], ...], list[list[int]]] = {}

    def _add_leaf(self, path: tuple[str, ...], nodes: Sequence[Node]) -> None:
        chain: list[int] = []
        for level, paths in enumerate(self.paths):
            prefix = path[: level + 1]
            if not paths or paths[-1] != prefix:  # leaves come sorted: a new prefix is last
                paths.append(prefix)
                self.children[level].append([])
                if chain:
                    self.children[level - 1][chain[-1]].append(len(paths) - 1)
            chain.append(len(paths) - 1)
        for node in nodes:
            self.leaves_of.setdefault(node.name, []).append(len(self.leaf_nodes))
        self.leaf_nodes.append(nodes)
        self.ancestors.append(tuple(chain))

    def idle_pods(self, requests: Mapping[str, int]) -> list[list[int]]:
        """Pods of this shape that fit per domain when nothing is in use: they depend on the
        nodes alone, so they are counted once per tree and shape (read only)."""
        key = tuple(sorted(requests.items()))
        if key not in self._idle:
            if len(self._idle) >= _IDLE_KEPT:  # a tree lives as long as its fleet: bounded
                del self._idle[next(iter(self._idle))]
            pods = [[0] * len(paths) for paths in self.paths]
            for nodes, ancestors in zip(self.leaf_nodes, self.ancestors, strict=True):
                fit = pods_fitting(nodes, requests)
                for level, index in enumerate(ancestors):
                    pods[level][index] += fit
            self._idle[key] = pods
        return self._idle[key]


class Capacity:
    """Pods of one shape that fit in every domain of a tree (per level), at some usage."""

    def __init__(self, tree: Tree, requests: Mapping[str, int], used: Usage):
        self.tree = tree
        self.requests = requests
        self.pods = [list(pods) for pods in tree.idle_pods(requests)]
        self.placements: dict[Hashable, Placement] = {}
        """Placements found at the current counts, by plan and flavor: a placement depends on
        the counts alone, and entries of a pass often ask alike while no count changes."""
        self.seen = len(used.changes) if isinstance(used, LiveUsage) else 0
        """How many of the usage's changes the counts include."""
        # Only the leaves of nodes in use have fewer pods than when idle.
        for leaf in {leaf for name in used for leaf in tree.leaves_of.get(name, ())}:
            self._recount(leaf, used)

    def catch_up(self, used: LiveUsage) -> None:
        """Recount only the leaves whose nodes' usage changed since last time."""
        changed = set(used.changes[self.seen :])
        self.seen = len(used.changes)
        for name in changed:
            for leaf in self.tree.leaves_of.get(name, ()):
                self._recount(leaf, used)

    def _recount(self, leaf: int, used: Usage) -> None:
        fit = pods_fitting(self.tree.leaf_nodes[leaf], self.requests, used)
        ancestors = self.tree.ancestors[leaf]
        delta = fit - self.pods[-1][ancestors[-1]]
        if not delta:
            return
        self.placements.clear()
        for level, index in enumerate(ancestors):
            self.pods[level][index] += delta


_CapacityKey = tuple[int, int, tuple[tuple[str, int], ...]]


class NodeIndex(Sequence[Node]):
    """A snapshot's nodes with what placement derives from them, kept for the snapshot's life
    (Kueue's per-snapshot TAS index): domain trees per flavor and pod filters, and the pods of
    each shape that fit per domain, kept in step with a LiveUsage node by node instead of
    recounted for every placement."""

    def __init__(self, nodes: Iterable[Node]):
        self._nodes = tuple(nodes)
        shared = _shared(self._nodes)
        self._in_flavor = shared.in_flavor
        self._trees = shared.trees
        self._first_names = shared.first_names
        self._capacities: dict[_CapacityKey, tuple[LiveUsage, Capacity]] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    @overload
    def __getitem__(self, index: int) -> Node: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Node]: ...

    def __getitem__(self, index: int | slice) -> Node | Sequence[Node]:
        return self._nodes[index]

    def in_flavor(
        self, levels: tuple[str, ...], flavor: ResourceFlavor
    ) -> dict[tuple[str, ...], list[Node]]:
        """Kueue's nodes cache: the Ready nodes with the flavor's nodeLabels and every level
        label, by their level values."""
        key = (levels, tuple(sorted(flavor.node_labels.items())))
        if key not in self._in_flavor:
            domains: dict[tuple[str, ...], list[Node]] = {}
            for node in self._nodes:
                if _in_flavor(node, flavor, levels):
                    domains.setdefault(tuple(node.labels[v] for v in levels), []).append(node)
            self._in_flavor[key] = domains
        return self._in_flavor[key]

    def tree(self, levels: tuple[str, ...], flavor: ResourceFlavor, pod_set: PodSet) -> Tree:
        """The domains whose nodes can take the PodSet's pods. Pod filters apply only when the
        lowest level is the hostname, as Kueue's scheduler simulation checks them only then."""
        by_host = levels[-1] == HOSTNAME
        tolerations = pod_set.tolerations + flavor.tolerations
        selector = tuple(sorted(pod_set.node_selector.items()))
        filters = (selector, pod_set.required_affinity, tolerations) if by_host else None
        key = (levels, tuple(sorted(flavor.node_labels.items())), filters)
        if key not in self._trees:
            pod = Pod("", {}, pod_set.node_selector, pod_set.required_affinity, tolerations)
            leaves = {
                path: [n for n in nodes if not by_host or matches_node(pod, n)]
                for path, nodes in self.in_flavor(levels, flavor).items()
            }
            if len(self._trees) >= _TREES_KEPT:  # shared while the fleet lasts: bounded
                del self._trees[next(iter(self._trees))]
            self._trees[key] = Tree(levels, {p: ns for p, ns in leaves.items() if ns})
        return self._trees[key]

    def capacity(self, tree: Tree, used: Usage, requests: Mapping[str, int]) -> Capacity:
        """Pods of this shape that fit per domain at `used`; kept across placements when
        `used` is a LiveUsage, counted afresh otherwise."""
        if not isinstance(used, LiveUsage):
            return Capacity(tree, requests, used)
        key = (id(used), id(tree), tuple(sorted(requests.items())))
        kept = self._capacities.get(key)
        if kept is None or kept[0] is not used:
            self._capacities[key] = (used, Capacity(tree, requests, used))
            return self._capacities[key][1]
        kept[1].catch_up(used)
        return kept[1]

    def first_names(self, levels: tuple[str, ...]) -> dict[tuple[str, ...], str]:
        """Per level values, the first node by name that carries them (any node with the
        level labels, as usage is charged whatever the node's state)."""
        if levels not in self._first_names:
            names: dict[tuple[str, ...], str] = {}
            for node in sorted(self._nodes, key=lambda n: n.name):
                if all(level in node.labels for level in levels):
                    names.setdefault(tuple(node.labels[v] for v in levels), node.name)
            self._first_names[levels] = names
        return self._first_names[levels]


class _Shared:
    """What a NodeIndex derives from its nodes alone (no usage): domains, trees (with their
    idle counts) and first names by key."""

    def __init__(self, nodes: tuple[Node, ...]):
        self.nodes = nodes
        """Held so that its id, the key, is not reused while the entry lives."""
        self.in_flavor: dict[Hashable, dict[tuple[str, ...], list[Node]]] = {}
        self.trees: dict[Hashable, Tree] = {}
        self.first_names: dict[tuple[str, ...], dict[tuple[str, ...], str]] = {}


_SHARED: dict[int, _Shared] = {}
_SHARED_KEPT = 4
_SHARED_LOCK = threading.Lock()


def _shared(nodes: tuple[Node, ...]) -> _Shared:
    """The derived data of this very tuple of nodes, shared by the NodeIndexes of every pass
    that sees it: the snapshot hands over the same tuple of frozen nodes while the fleet is
    unchanged, and building the trees was most of a TAS pass. Keyed by identity, never by
    value, so a changed fleet (a new tuple) starts afresh; the few last tuples are kept."""
    with _SHARED_LOCK:  # passes of different clusters may run in threads
        entry = _SHARED.get(id(nodes))
        if entry is None or entry.nodes is not nodes:
            entry = _SHARED[id(nodes)] = _Shared(nodes)
            while len(_SHARED) > _SHARED_KEPT:
                del _SHARED[next(iter(_SHARED))]
        return entry


def indexed(nodes: Sequence[Node]) -> NodeIndex:
    return nodes if isinstance(nodes, NodeIndex) else NodeIndex(nodes)


def _in_flavor(node: Node, flavor: ResourceFlavor, levels: Sequence[str]) -> bool:
    """Kueue's nodes cache: Ready, the flavor's nodeLabels, every level label."""
    return (
        node.ready
        and all(node.labels.get(k) == v for k, v in flavor.node_labels.items())
        and all(level in node.labels for level in levels)
    )
