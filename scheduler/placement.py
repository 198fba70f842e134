"""Pod placement on nodes, as kube-scheduler filters and scores them.

Kueue admits by quota only; a pod it admits can still wait for a node. This is the part of
kube-scheduler the simulator needs: NodeAffinity (nodeSelector + required node affinity),
TaintToleration, NodeResourcesFit with the LeastAllocated score, and a `pods` capacity;
and the pod affinities JobSet and LeaderWorkerSet inject for exclusive placement.
"""

from __future__ import annotations

from collections import Counter
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


NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
POD_AFFINITY = "node(s) didn't match pod affinity/anti-affinity rules"

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
    return _rejection(pod, node) is None


def _rejection(pod: Pod, node: Node) -> str | None:
    """Why those filters reject the node, in kube-scheduler's words and filter order
    (TaintToleration, then NodeAffinity); None when none does."""
    if not node.ready:  # the node lifecycle controller's taint
        return "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(
            t.tolerates(taint) for t in pod.tolerations
        ):
            return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return NODE_AFFINITY
    # Terms are ORed, their requirements ANDed; an empty term matches no node (k8s API).
    if pod.required_affinity and not any(
        term and all(req.matches(node.labels) for req in term) for term in pod.required_affinity
    ):
        return NODE_AFFINITY
    return None


def fits_node(pod: Pod, node: Node, used: Mapping[str, int]) -> bool:
    return not _shortfall(pod, node, used)


def _shortfall(pod: Pod, node: Node, used: Mapping[str, int]) -> list[str]:
    """The resources (`pods` among them) the node has too little free of for the pod."""
    requests = {**pod.requests, PODS: POD}
    return [
        resource
        for resource, amount in requests.items()
        if amount and used.get(resource, 0) + amount > node.allocatable.get(resource, 0)
    ]


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


def why_unplaced(
    pod: Pod,
    nodes: Iterable[Node],
    used: Mapping[str, Mapping[str, int]],
    owners: DomainOwners | None = None,
) -> str | None:
    """kube-scheduler's FailedScheduling message for a pod no node takes now, as `place`
    filters them ("0/4 nodes are available: 1 Insufficient google.com/tpu, 3 node(s) didn't
    match Pod's node affinity/selector."); None when some node would take it.

    Like kube-scheduler, a node counts under the first filter that rejects it, under every
    resource it lacks, and the "count reason" strings are sorted (framework.FitError.Error)."""
    node_list = list(nodes)
    if not node_list:
        return "no nodes available to schedule pods"
    exclusivity = _Exclusivity(owners or {})
    reasons: Counter[str] = Counter()
    for node in node_list:
        rejection = _rejection(pod, node)
        if rejection is not None:
            reasons[rejection] += 1
        elif short := _shortfall(pod, node, used.get(node.name, {})):
            reasons.update("Too many pods" if r == PODS else f"Insufficient {r}" for r in short)
        elif not exclusivity.allows(pod, node):
            reasons[POD_AFFINITY] += 1
        else:
            return None
    listed = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
    return f"0/{len(node_list)} nodes are available: {listed}."
