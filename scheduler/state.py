"""The mutable view of a snapshot that one scheduling pass works on."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from scheduler.model import (
    Admission,
    ClusterQueue,
    FlavorResource,
    PodSet,
    ResourceFlavor,
    Snapshot,
    Workload,
)
from scheduler.quota import NodeKey, QuotaTree
from scheduler.topology import NodeIndex, TopologyUsage, add_usage, is_tas_only, node_usage


@dataclass(frozen=True, slots=True)
class _Charge:
    pod_sets: tuple[PodSet, ...]
    admission: Admission
    quota: dict[FlavorResource, int]
    nodes: dict[str, dict[str, int]]
    """TAS: what its pods take per node (empty without topology assignments)."""


_Problem = tuple[PodSet, ClusterQueue, str | None]


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
        self._roots: dict[str, NodeKey] = {}
        self._tas_only: dict[str, tuple[ClusterQueue, bool]] = {}
        self._charges: dict[tuple[int, int], _Charge] = {}
        """What a workload holds, by the identities of its PodSets and Admission: the snapshot
        shares those among workloads of one shape and admission, and preemption releases and
        holds the same workloads over and over, so it is worked out once per pair."""
        self.flavor_problems: dict[tuple[int, int, str], _Problem] = {}
        """flavors.py's memo: why a flavor cannot serve a PodSet of a resource group."""
        self._members: dict[str, set[str]] = {}
        """Per ClusterQueue, its set in `_by_root`."""
        self.hold_all(w for w in snapshot.workloads if w.admission is not None)

    def cq(self, name: str) -> ClusterQueue:
        return self.cluster_queues[name]

    def root_of(self, cq_name: str) -> NodeKey:
        root = self._roots.get(cq_name)
        if root is None:
            root = self._roots[cq_name] = self.tree.root(self.tree.cq(cq_name))
        return root

    def tas_only(self, cq: ClusterQueue) -> bool:
        # Flavors and topologies are fixed for the pass: once per ClusterQueue object.
        known = self._tas_only.get(cq.name)
        if known is None or known[0] is not cq:
            known = self._tas_only[cq.name] = (cq, is_tas_only(cq, self.flavors, self.topologies))
        return known[1]

    def hold(self, workload: Workload, quota: Mapping[FlavorResource, int] | None = None) -> None:
        """Charge an admitted (or admitting) workload's usage to its ClusterQueue; `quota`,
        when the caller has it already, is that usage (its flavor assignment's)."""
        if quota is not None:
            self._charge(workload, dict(quota))
        self.hold_all((workload,))

    def _charge(
        self, workload: Workload, quota: dict[FlavorResource, int] | None = None
    ) -> _Charge:
        admission = workload.admission
        assert admission is not None
        key = (id(workload.pod_sets), id(admission))
        charge = self._charges.get(key)
        # The charge keeps both objects alive, so no other object can have their ids.
        if charge is None:
            charge = _Charge(
                workload.pod_sets,
                admission,
                workload.usage() if quota is None else quota,
                self._node_usage(workload),
            )
            self._charges[key] = charge
        return charge

    def _node_usage(self, workload: Workload) -> dict[str, dict[str, int]]:
        """Its pods' places on nodes (TAS), held until it is released (kueue-semantics §11)."""
        assert workload.admission is not None
        if all(psa.topology_assignment is None for psa in workload.admission.pod_sets):
            return {}
        by_name = {ps.name: ps for ps in workload.pod_sets}
        return add_usage(
            *(
                node_usage(psa.topology_assignment, by_name[psa.name], self.nodes)
                for psa in workload.admission.pod_sets
                if psa.topology_assignment is not None
            )
        )

    def release(self, key: str) -> None:
        self.release_all((key,))

    def release_all(self, keys: Iterable[str]) -> list[Workload]:
        """Give back what each of `keys` holds; returns the workloads, for `hold_all`. The quota
        tree is charged once per ClusterQueue, as its usage does not depend on the order of
        charges."""
        released = []
        by_cq: dict[str, dict[FlavorResource, int]] = {}
        for key in keys:
            self.topology.release(key)
            workload = self.admitted.pop(key)
            assert workload.admission is not None
            cq_name = workload.admission.cluster_queue
            _add_to(by_cq.setdefault(cq_name, {}), self.usage.pop(key))
            self._members_of(cq_name).discard(key)
            released.append(workload)
        for cq_name, usage in by_cq.items():
            self.tree.remove(self.tree.cq(cq_name), usage)
        return released

    def hold_all(self, workloads: Iterable[Workload]) -> None:
        """`hold` for each of `workloads`, charging the tree once per ClusterQueue."""
        by_cq: dict[str, dict[FlavorResource, int]] = {}
        for workload in workloads:
            assert workload.admission is not None
            charge = self._charge(workload)
            if charge.nodes:
                self.topology.hold(workload.key, charge.nodes)
            cq_name = workload.admission.cluster_queue
            if cq_name not in self.cluster_queues:
                continue  # its ClusterQueue was deleted: nothing left to charge
            self.admitted[workload.key] = workload
            self.usage[workload.key] = charge.quota
            _add_to(by_cq.setdefault(cq_name, {}), charge.quota)
            self._members_of(cq_name).add(workload.key)
        for cq_name, usage in by_cq.items():
            self.tree.add(self.tree.cq(cq_name), usage)

    def _members_of(self, cq_name: str) -> set[str]:
        members = self._members.get(cq_name)
        if members is None:
            members = self._members[cq_name] = self._by_root[self.root_of(cq_name)][cq_name]
        return members

    def in_tree_of(self, cq_name: str) -> Iterator[Workload]:
        """Workloads holding quota anywhere in the cohort tree of `cq_name`."""
        for _, keys in self.queues_in_tree_of(cq_name):
            yield from (self.admitted[key] for key in keys)

    def queues_in_tree_of(self, cq_name: str) -> Iterator[tuple[str, set[str]]]:
        """(ClusterQueue, keys of its workloads holding quota) over the tree of `cq_name`."""
        for name, keys in self._by_root.get(self.root_of(cq_name), {}).items():
            if keys:
                yield name, keys


def _add_to(total: dict[FlavorResource, int], usage: Mapping[FlavorResource, int]) -> None:
    for fr, amount in usage.items():
        total[fr] = total.get(fr, 0) + amount
