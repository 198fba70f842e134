"""Per-node usage: what pods take of each node's allocatable, and how many more fit."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.model import POD, PODS, PodSet
from scheduler.placement import Node

Usage = Mapping[str, Mapping[str, int]]
"""Node name -> resource -> milli-units in use."""


def per_pod(pod_set: PodSet) -> dict[str, int]:
    """What one pod takes on a node: its requests plus one `pods`."""
    requests = {r: v for r, v in pod_set.requests.items() if v}
    requests[PODS] = requests.get(PODS, 0) + POD
    return requests


def pods_fitting(nodes: Iterable[Node], requests: Mapping[str, int], *usages: Usage) -> int:
    """How many pods fit in the nodes' allocatable minus `usages`, pooled: Kueue counts free
    capacity per domain, not per node."""
    free = dict.fromkeys(requests, 0)
    for node in nodes:
        taken = [usage[node.name] for usage in usages if node.name in usage]
        for resource in free:
            amount = node.allocatable.get(resource, 0)
            free[resource] += amount - sum(t.get(resource, 0) for t in taken)
    return min(max(0, free[r]) // amount for r, amount in requests.items())


def add_usage(*usages: Usage) -> dict[str, dict[str, int]]:
    """The sum of several per-node usages."""
    total: dict[str, dict[str, int]] = {}
    for usage in usages:
        for name, amounts in usage.items():
            node_used = total.setdefault(name, {})
            for resource, amount in amounts.items():
                node_used[resource] = node_used.get(resource, 0) + amount
    return total


class LiveUsage(dict[str, dict[str, int]]):
    """Per-node usage that changes in place and logs the nodes it changed on, so that a
    NodeIndex recounts only their domains (Kueue updates free capacity incrementally)."""

    def __init__(self, usage: Usage | None = None):
        super().__init__(add_usage(usage or {}))
        self.changes: list[str] = []

    def add(self, usage: Usage) -> None:
        for name, amounts in usage.items():
            node_used = self.setdefault(name, {})
            for resource, amount in amounts.items():
                node_used[resource] = node_used.get(resource, 0) + amount
            self.changes.append(name)

    def subtract(self, usage: Usage) -> None:
        """Take off what `add` put on; what drops to nothing is gone."""
        for name, amounts in usage.items():
            node_used = self.setdefault(name, {})
            for resource, amount in amounts.items():
                node_used[resource] = node_used.get(resource, 0) - amount
                if not node_used[resource]:
                    del node_used[resource]
            if not node_used:
                del self[name]
            self.changes.append(name)


class TopologyUsage:
    """Per-node usage during a scheduling pass: non-TAS pods, plus what each TAS workload
    holds, released by workload key (as ClusterState holds and releases quota)."""

    def __init__(self, non_tas: Usage | None = None):
        self.non_tas = LiveUsage(non_tas)
        self._held: dict[str, dict[str, dict[str, int]]] = {}
        self._total = LiveUsage(self.non_tas)

    def hold(self, key: str, usage: Usage) -> None:
        self.release(key)
        self._held[key] = add_usage(usage)
        self._total.add(self._held[key])

    def release(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self._total.subtract(held)

    def used(self) -> LiveUsage:
        """Non-TAS usage plus every held workload's, kept up to date in place."""
        return self._total
