"""Pod placement on nodes, as kube-scheduler filters and scores them.

Kueue admits by quota only; a pod it admits can still wait for a node. This is the part of
kube-scheduler the simulator needs: NodeAffinity (nodeSelector + required node affinity),
TaintToleration, NodeResourcesFit with the LeastAllocated score, and a `pods` capacity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.model import NodeSelectorTerm, Taint, Toleration

PODS = "pods"


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
    requests = {**pod.requests, PODS: 1000}
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
    nodes: Iterable[Node], used: Mapping[str, Mapping[str, int]], pods: Sequence[Pod]
) -> dict[str, str | None]:
    """Bind pods in order to the best-scoring feasible node; None where no node fits."""
    usage = {name: dict(amounts) for name, amounts in used.items()}
    node_list = sorted(nodes, key=lambda n: n.name)
    bindings: dict[str, str | None] = {}
    for pod in pods:
        best: Node | None = None
        best_score = -1.0
        for node in node_list:
            node_used = usage.setdefault(node.name, {})
            if not matches_node(pod, node) or not fits_node(pod, node, node_used):
                continue
            score = _score(pod, node, node_used)
            if score > best_score:
                best, best_score = node, score
        bindings[pod.key] = best.name if best else None
        if best is not None:
            node_used = usage[best.name]
            for resource, amount in {**pod.requests, PODS: 1000}.items():
                node_used[resource] = node_used.get(resource, 0) + amount
    return bindings
