"""Pod placement on nodes, as kube-scheduler filters and scores them.

Kueue admits by quota only; a pod it admits can still wait for a node. This is the part of
kube-scheduler the simulator needs: NodeAffinity (nodeSelector + required node affinity),
TaintToleration, NodeResourcesFit with the LeastAllocated score, and a `pods` capacity;
and the pod affinities JobSet and LeaderWorkerSet inject for exclusive placement.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.model import POD, PODS, NodeSelectorTerm, Taint, Toleration


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Mapping[str, int]
    ready: bool = True


@dataclass(frozen=True, slots=True)
class Pod:
    key: str
    requests: Mapping[str, int]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    exclusive: tuple[str, str] | None = None
    """(node label, group): JobSet's exclusive placement. The group's pods share one domain
    (nodes with one value of the label), and no other group places pods there."""


# (node label, value) -> the group that owns that domain.
DomainOwners = Mapping[tuple[str, str], str]


class _Exclusivity:
    """Which group holds which domain, as pods are bound in order."""

    def __init__(self, owners: DomainOwners):
        self.owner = dict(owners)
        self.domain = {(key, group): value for (key, value), group in owners.items()}

    def allows(self, pod: Pod, node: Node) -> bool:
        if pod.exclusive is None:
            return True
        key, group = pod.exclusive
        value = node.labels.get(key)
        if value is None:
            return False
        held = self.domain.get((key, group))
        if held is not None:
            return value == held  # followers go where the first pod went
        return self.owner.get((key, value), group) == group

    def bind(self, pod: Pod, node: Node) -> None:
        if pod.exclusive is not None:
            key, group = pod.exclusive
            value = node.labels[key]
            self.owner[(key, value)] = group
            self.domain[(key, group)] = value


def matches_node(pod: Pod, node: Node) -> bool:
    """Filters that do not depend on free capacity."""
    if not node.ready:
        return False
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    # Terms are ORed, their requirements ANDed; an empty term matches no node (k8s API).
    if pod.required_affinity and not any(
        term and all(req.matches(node.labels) for req in term) for term in pod.required_affinity
    ):
        return False
    return all(
        taint.effect not in ("NoSchedule", "NoExecute")
        or any(t.tolerates(taint) for t in pod.tolerations)
        for taint in node.taints
    )


def fits_node(pod: Pod, node: Node, used: Mapping[str, int]) -> bool:
    requests = {**pod.requests, PODS: POD}
    return all(
        used.get(resource, 0) + amount <= node.allocatable.get(resource, 0)
        for resource, amount in requests.items()
        if amount
    )


def _score(pod: Pod, node: Node, used: Mapping[str, int]) -> float:
    """LeastAllocated: the mean free fraction of the resources the pod asks for."""
    resources = [r for r, v in pod.requests.items() if v] or [PODS]
    free = [
        (node.allocatable.get(r, 0) - used.get(r, 0) - pod.requests.get(r, 0))
        / max(1, node.allocatable.get(r, 0))
        for r in resources
    ]
    return sum(free) / len(free)


def place(
    nodes: Iterable[Node],
    used: Mapping[str, Mapping[str, int]],
    pods: Sequence[Pod],
    owners: DomainOwners | None = None,
) -> dict[str, str | None]:
    """Bind pods in order to the best-scoring feasible node; None where no node fits.

    `owners`: the exclusive domains bound pods already hold."""
    usage = {name: dict(amounts) for name, amounts in used.items()}
    exclusivity = _Exclusivity(owners or {})
    node_list = sorted(nodes, key=lambda n: n.name)
    bindings: dict[str, str | None] = {}
    for pod in pods:
        best: Node | None = None
        best_score = -1.0
        for node in node_list:
            node_used = usage.setdefault(node.name, {})
            if not matches_node(pod, node) or not fits_node(pod, node, node_used):
                continue
            if not exclusivity.allows(pod, node):
                continue
            score = _score(pod, node, node_used)
            if score > best_score:
                best, best_score = node, score
        bindings[pod.key] = best.name if best else None
        if best is not None:
            exclusivity.bind(pod, best)
            node_used = usage[best.name]
            for resource, amount in {**pod.requests, PODS: POD}.items():
                node_used[resource] = node_used.get(resource, 0) + amount
    return bindings
