"""The mutable view of a snapshot that one scheduling pass works on."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from scheduler.model import ClusterQueue, FlavorResource, ResourceFlavor, Snapshot, Workload
from scheduler.quota import NodeKey, QuotaTree
from scheduler.topology import NodeIndex, TopologyUsage, add_usage, is_tas_only, node_usage


class ClusterState:
    """Quota tree plus the workloads holding quota, indexed by ClusterQueue and by cohort root."""

    def __init__(self, snapshot: Snapshot):
        self.cluster_queues = snapshot.cluster_queues
        self.cohorts = snapshot.cohorts
        self.config = snapshot.config
        self.local_queue_usage: dict[str, float] = dict(snapshot.local_queue_usage)
        """Admission fair sharing: each LocalQueue's usage, this pass's entry penalties included
        (the scheduler's queues charge it; preemption orders candidates by it)."""
        self.flavors: dict[str, ResourceFlavor] = dict(snapshot.flavors)
        self.tree = QuotaTree(snapshot.cluster_queues, snapshot.cohorts)
        self.admitted: dict[str, Workload] = {}
        self.usage: dict[str, dict[FlavorResource, int]] = {}
        self._by_root: dict[NodeKey, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self.topologies = snapshot.topologies
        self.nodes = NodeIndex(snapshot.nodes)
        self.topology = TopologyUsage(snapshot.non_tas_usage)
        for workload in snapshot.workloads:
            if workload.admission is not None:
                self.hold(workload)

    def cq(self, name: str) -> ClusterQueue:
        return self.cluster_queues[name]

    def root_of(self, cq_name: str) -> NodeKey:
        return self.tree.root(self.tree.cq(cq_name))

    def tas_only(self, cq: ClusterQueue) -> bool:
        return is_tas_only(cq, self.flavors, self.topologies)

    def hold(self, workload: Workload) -> None:
        """Charge an admitted (or admitting) workload's usage to its ClusterQueue."""
        assert workload.admission is not None
        self._hold_topology(workload)
        cq_name = workload.admission.cluster_queue
        if cq_name not in self.cluster_queues:
            return  # its ClusterQueue was deleted: nothing left to charge
        usage = workload.usage()
        self.admitted[workload.key] = workload
        self.usage[workload.key] = usage
        self.tree.add(self.tree.cq(cq_name), usage)
        self._by_root[self.root_of(cq_name)][cq_name].add(workload.key)

    def _hold_topology(self, workload: Workload) -> None:
        """Its pods' places on nodes (TAS), held until it is released (kueue-semantics §11)."""
        assert workload.admission is not None
        by_name = {ps.name: ps for ps in workload.pod_sets}
        usage = add_usage(
            *(
                node_usage(psa.topology_assignment, by_name[psa.name], self.nodes)
                for psa in workload.admission.pod_sets
                if psa.topology_assignment is not None
            )
        )
        if usage:
            self.topology.hold(workload.key, usage)

    def release(self, key: str) -> None:
        self.topology.release(key)
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
