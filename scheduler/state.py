"""The mutable view of a snapshot that one scheduling pass works on."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from scheduler.model import ClusterQueue, FlavorResource, ResourceFlavor, Snapshot, Workload
from scheduler.quota import NodeKey, QuotaTree


class ClusterState:
    """Quota tree plus the workloads holding quota, indexed by ClusterQueue and by cohort root."""

    def __init__(self, snapshot: Snapshot):
        self.cluster_queues = snapshot.cluster_queues
        self.flavors: dict[str, ResourceFlavor] = dict(snapshot.flavors)
        self.tree = QuotaTree(snapshot.cluster_queues, snapshot.cohorts)
        self.admitted: dict[str, Workload] = {}
        self.usage: dict[str, dict[FlavorResource, int]] = {}
        self._by_root: dict[NodeKey, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for workload in snapshot.workloads:
            if workload.admission is not None:
                self.hold(workload)

    def cq(self, name: str) -> ClusterQueue:
        return self.cluster_queues[name]

    def root_of(self, cq_name: str) -> NodeKey:
        return self.tree.root(self.tree.cq(cq_name))

    def hold(self, workload: Workload) -> None:
        """Charge an admitted (or admitting) workload's usage to its ClusterQueue."""
        assert workload.admission is not None
        cq_name = workload.admission.cluster_queue
        if cq_name not in self.cluster_queues:
            return  # its ClusterQueue was deleted: nothing left to charge
        usage = workload.usage()
        self.admitted[workload.key] = workload
        self.usage[workload.key] = usage
        self.tree.add(self.tree.cq(cq_name), usage)
        self._by_root[self.root_of(cq_name)][cq_name].add(workload.key)

    def release(self, key: str) -> None:
        workload = self.admitted.pop(key)
        assert workload.admission is not None
        cq_name = workload.admission.cluster_queue
        self.tree.remove(self.tree.cq(cq_name), self.usage.pop(key))
        self._by_root[self.root_of(cq_name)][cq_name].discard(key)

    def in_tree_of(self, cq_name: str) -> Iterator[Workload]:
        """Workloads holding quota anywhere in the cohort tree of `cq_name`."""
        for _, keys in self.queues_in_tree_of(cq_name):
            yield from (self.admitted[key] for key in keys)

    def queues_in_tree_of(self, cq_name: str) -> Iterator[tuple[str, set[str]]]:
        """(ClusterQueue, keys of its workloads holding quota) over the tree of `cq_name`."""
        for name, keys in self._by_root.get(self.root_of(cq_name), {}).items():
            if keys:
                yield name, keys
