"""Quota arithmetic over the ClusterQueue/Cohort tree (kueue-semantics §5).

Mirrors Kueue's `pkg/cache/scheduler/resource_node.go`: every node (ClusterQueue or Cohort)
has, per (flavor, resource), a nominal quota with optional borrowing and lending limits; a
cohort's subtree quota is what its children lend it; usage climbs the tree only past each
node's private (never-lent) quota.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scheduler.model import ClusterQueue, Cohort, FlavorResource, ResourceGroup, ResourceQuota

NodeKey = tuple[str, str]
"""("cq", name) or ("cohort", name): ClusterQueues and Cohorts may share a name."""


@dataclass(slots=True)
class _Node:
    key: NodeKey
    parent: NodeKey | None
    quotas: dict[FlavorResource, ResourceQuota]
    children: list[NodeKey] = field(default_factory=list)
    subtree_quota: dict[FlavorResource, int] = field(default_factory=dict)
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    height: int = 0
    local_quota: dict[FlavorResource, int] = field(default_factory=dict)
    """Quota never lent to the parent (Kueue's local quota); fixed once the tree is built."""


def _quotas(groups: Iterable[ResourceGroup]) -> dict[FlavorResource, ResourceQuota]:
    return {
        (flavor.name, resource): quota
        for group in groups
        for flavor in group.flavors
        for resource, quota in flavor.resources.items()
    }


class QuotaTree:
    """Mutable usage over an immutable quota tree; `copy()` is cheap enough for what-ifs."""

    def __init__(self, cluster_queues: Mapping[str, ClusterQueue], cohorts: Mapping[str, Cohort]):
        self._nodes: dict[NodeKey, _Node] = {}
        for cohort in cohorts.values():
            parent = ("cohort", cohort.parent) if cohort.parent else None
            key = ("cohort", cohort.name)
            self._nodes[key] = _Node(key, parent, _quotas(cohort.resource_groups))
        for cq in cluster_queues.values():
            parent = ("cohort", cq.cohort) if cq.cohort else None
            key = ("cq", cq.name)
            self._nodes[key] = _Node(key, parent, _quotas(cq.resource_groups))
        # A cohort named only by a ClusterQueue (or as a parent) exists implicitly, without quota.
        for node in list(self._nodes.values()):
            if node.parent and node.parent not in self._nodes:
                self._nodes[node.parent] = _Node(node.parent, None, {})
        self._break_cycles()
        for node in self._nodes.values():
            if node.parent:
                self._nodes[node.parent].children.append(node.key)
        for root in [n for n in self._nodes.values() if n.parent is None]:
            self._compute_subtree(root)
        # The structure never changes after this: paths up the tree are walked once.
        self._ancestors = {key: self._path_up(key) for key in self._nodes}

    def _break_cycles(self) -> None:
        # Kueue rejects cohort cycles; a cycle that slipped in is cut so nothing loops forever.
        for node in self._nodes.values():
            seen = {node.key}
            parent = node.parent
            while parent is not None:
                if parent in seen:
                    node.parent = None
                    break
                seen.add(parent)
                parent = self._nodes[parent].parent

    def _compute_subtree(self, node: _Node) -> None:
        subtree = {fr: q.nominal for fr, q in node.quotas.items()}
        height = 0
        for child_key in node.children:
            child = self._nodes[child_key]
            self._compute_subtree(child)
            height = max(height, child.height + 1)
            for fr, amount in child.subtree_quota.items():
                subtree[fr] = subtree.get(fr, 0) + amount - self._local_quota(child, fr)
        node.subtree_quota = subtree
        node.local_quota = {
            fr: max(0, subtree.get(fr, 0) - q.lending_limit)
            for fr, q in node.quotas.items()
            if q.lending_limit is not None
        }
        node.height = height if node.key[0] == "cohort" else 0

    def copy(self) -> QuotaTree:
        clone = object.__new__(QuotaTree)
        clone._ancestors = self._ancestors
        clone._nodes = {
            key: _Node(
                n.key,
                n.parent,
                n.quotas,
                n.children,
                n.subtree_quota,
                dict(n.usage),
                n.height,
                n.local_quota,
            )
            for key, n in self._nodes.items()
        }
        return clone

    # -- structure ---------------------------------------------------------------------------

    def cq(self, name: str) -> NodeKey:
        return ("cq", name)

    def parent(self, key: NodeKey) -> NodeKey | None:
        return self._nodes[key].parent

    def _path_up(self, key: NodeKey) -> tuple[NodeKey, ...]:
        chain = []
        parent = self._nodes[key].parent
        while parent is not None:
            chain.append(parent)
            parent = self._nodes[parent].parent
        return tuple(chain)

    def ancestors(self, key: NodeKey) -> tuple[NodeKey, ...]:
        return self._ancestors[key]

    def root(self, key: NodeKey) -> NodeKey:
        chain = self._ancestors[key]
        return chain[-1] if chain else key

    def height(self, key: NodeKey) -> int:
        return self._nodes[key].height

    def children(self, key: NodeKey) -> list[NodeKey]:
        return self._nodes[key].children

    def nodes(self) -> list[NodeKey]:
        return list(self._nodes)

    def subtree_frs(self, key: NodeKey) -> list[FlavorResource]:
        """The (flavor, resource) pairs this node's subtree has quota entries for."""
        return list(self._nodes[key].subtree_quota)

    def nominal(self, key: NodeKey, fr: FlavorResource) -> int:
        quota = self._nodes[key].quotas.get(fr)
        return quota.nominal if quota else 0

    def borrowing_limit(self, key: NodeKey, fr: FlavorResource) -> int | None:
        quota = self._nodes[key].quotas.get(fr)
        return quota.borrowing_limit if quota else None

    def subtree_quota(self, key: NodeKey, fr: FlavorResource) -> int:
        return self._nodes[key].subtree_quota.get(fr, 0)

    def usage(self, key: NodeKey, fr: FlavorResource) -> int:
        return self._nodes[key].usage.get(fr, 0)

    # -- arithmetic --------------------------------------------------------------------------

    def _local_quota(self, node: _Node, fr: FlavorResource) -> int:
        return node.local_quota.get(fr, 0)

    def local_available(self, key: NodeKey, fr: FlavorResource) -> int:
        node = self._nodes[key]
        return max(0, self._local_quota(node, fr) - node.usage.get(fr, 0))

    def available(self, key: NodeKey, fr: FlavorResource) -> int:
        """Unused quota this node can reach now, within its limits (Kueue `available`)."""
        return max(0, self._available(key, fr))

    def _available(self, key: NodeKey, fr: FlavorResource) -> int:
        node = self._nodes[key]
        usage = node.usage.get(fr, 0)
        if node.parent is None:
            return node.subtree_quota.get(fr, 0) - usage
        local = self._local_quota(node, fr)
        parent_available = self._available(node.parent, fr)
        quota = node.quotas.get(fr)
        if quota is not None and quota.borrowing_limit is not None:
            stored_in_parent = node.subtree_quota.get(fr, 0) - local
            used_in_parent = max(0, usage - local)
            parent_available = min(
                parent_available, stored_in_parent - used_in_parent + quota.borrowing_limit
            )
        return max(0, local - usage) + parent_available

    def potential_available(self, key: NodeKey, fr: FlavorResource) -> int:
        """The most this node could ever get on an empty cluster (Kueue `potentialAvailable`)."""
        node = self._nodes[key]
        if node.parent is None:
            return node.subtree_quota.get(fr, 0)
        reachable = self._local_quota(node, fr) + self.potential_available(node.parent, fr)
        quota = node.quotas.get(fr)
        if quota is not None and quota.borrowing_limit is not None:
            reachable = min(reachable, node.subtree_quota.get(fr, 0) + quota.borrowing_limit)
        return reachable

    def is_borrowing(self, key: NodeKey, fr: FlavorResource, extra: int = 0) -> bool:
        node = self._nodes[key]
        return node.usage.get(fr, 0) + extra > node.subtree_quota.get(fr, 0)

    def borrowing_level(self, key: NodeKey, fr: FlavorResource, amount: int) -> int:
        """Height of the lowest subtree whose quota covers `amount` more (0: own quota)."""
        return self.lowest_subtree_that_fits(key, fr, amount)[0]

    def lowest_subtree_that_fits(
        self, key: NodeKey, fr: FlavorResource, amount: int
    ) -> tuple[int, bool]:
        """Kueue `FindHeightOfLowestSubtreeThatFits`, at current usage.

        Returns the height of the lowest node on the path to the root whose subtree quota
        covers `amount` more (0 when the node's own quota does, the root's height when none
        does), and whether that subtree is smaller than the whole cohort tree.
        """
        node = self._nodes[key]
        if node.parent is None:
            return 0, False
        if not self.is_borrowing(key, fr, amount):
            return 0, True
        remaining = amount - self.local_available(key, fr)
        for ancestor in self.ancestors(key):
            if not self.is_borrowing(ancestor, fr, remaining):
                return self._nodes[ancestor].height, self._nodes[ancestor].parent is not None
            remaining -= self.local_available(ancestor, fr)
        return self._nodes[self.root(key)].height, False

    def within_quota(self, key: NodeKey, frs: Iterable[FlavorResource]) -> bool:
        """Kueue `IsWithinNominalInResources`: usage <= subtree quota on every one of `frs`."""
        node = self._nodes[key]
        return all(node.usage.get(fr, 0) <= node.subtree_quota.get(fr, 0) for fr in frs)

    def add(self, key: NodeKey, usage: Mapping[FlavorResource, int], sign: int = 1) -> None:
        """Charge (sign=1) or release (sign=-1) usage on a ClusterQueue and up its cohorts."""
        for fr, amount in usage.items():
            node: _Node | None = self._nodes[key]
            delta = sign * amount
            while node is not None and delta:
                old = node.usage.get(fr, 0)
                new = old + delta
                node.usage[fr] = new
                local = node.local_quota.get(fr, 0)
                delta = max(0, new - local) - max(0, old - local)
                node = self._nodes[node.parent] if node.parent is not None else None

    def remove(self, key: NodeKey, usage: Mapping[FlavorResource, int]) -> None:
        self.add(key, usage, sign=-1)

    def fits(self, key: NodeKey, usage: Mapping[FlavorResource, int]) -> bool:
        return all(amount <= self.available(key, fr) for fr, amount in usage.items())
