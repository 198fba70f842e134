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

from scheduler.model import PODS, NodeSelectorTerm, Taint, Toleration, node_charge


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
    requests = node_charge(pod.requests)
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


_INFEASIBLE = float("-inf")


class _Shape:
    """The static filters and current scores of pods alike but for their names (a Job's pods
    mostly are): the filters run once per shape, and a binding changes one node's usage, so
    only that node's score needs recomputing (`refresh`), with `_shortfall`'s and `_score`'s
    arithmetic."""

    __slots__ = ("charge", "needs", "scored", "nodes", "where", "scores", "synced")

    def __init__(
        self,
        pod: Pod,
        nodes: Sequence[Node],
        usage: Mapping[str, Mapping[str, int]],
        synced: int,
    ):
        self.charge = list(node_charge(pod.requests).items())
        """What binding the pod adds to its node's usage."""
        self.needs = [(r, amount) for r, amount in self.charge if amount]
        resources = [r for r, v in pod.requests.items() if v] or [PODS]
        self.scored = [(r, pod.requests.get(r, 0)) for r in resources]
        self.nodes = [node for node in nodes if matches_node(pod, node)]
        self.where: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            self.where.setdefault(node.name, []).append(i)
        self.scores = [self._score(node, usage[node.name]) for node in self.nodes]
        self.synced = synced
        """How many of `place`'s bindings the scores account for."""

    def _score(self, node: Node, used: Mapping[str, int]) -> float:
        """`_score` where the pod fits (`_shortfall` is empty), `_INFEASIBLE` elsewhere."""
        allocatable = node.allocatable
        if any(used.get(r, 0) + amount > allocatable.get(r, 0) for r, amount in self.needs):
            return _INFEASIBLE
        free = [
            (allocatable.get(r, 0) - used.get(r, 0) - amount) / max(1, allocatable.get(r, 0))
            for r, amount in self.scored
        ]
        return sum(free) / len(free)

    def refresh(self, landed: Sequence[str], usage: Mapping[str, Mapping[str, int]]) -> None:
        """Rescore the nodes pods went to since the last call (`landed`: node names, in
        binding order)."""
        fresh = landed[self.synced :]
        if len(fresh) < len(self.nodes):
            for name in set(fresh):
                for i in self.where.get(name, ()):
                    self.scores[i] = self._score(self.nodes[i], usage[name])
        else:  # no dearer than rescoring all (a shape back after many others)
            self.scores = [self._score(node, usage[node.name]) for node in self.nodes]
        self.synced = len(landed)

    def best(self, pod: Pod, exclusivity: _Exclusivity) -> Node | None:
        """The first node, in name order, with the highest score if that is above -1 (scores
        fall below only for a pod that requests `pods` itself); None if there is none."""
        if pod.exclusive is None:
            top = max(self.scores, default=_INFEASIBLE)
            return self.nodes[self.scores.index(top)] if top > -1.0 else None
        # Which domains an exclusive pod may take changes with each binding: asked pod by pod.
        best: Node | None = None
        best_score = -1.0
        for node, score in zip(self.nodes, self.scores, strict=True):
            if score > best_score and exclusivity.allows(pod, node):
                best, best_score = node, score
        return best


def _shape_key(pod: Pod) -> tuple[object, ...]:
    """What `_Shape` depends on (not `exclusive`: `_Shape.best` asks about it). Request values
    with their type: 1 and 1.0 are one key, but not the same arithmetic."""
    return (
        tuple((r, type(v), v) for r, v in pod.requests.items()),
        tuple(pod.node_selector.items()),
        pod.required_affinity,
        pod.tolerations,
    )


def place(
    nodes: Iterable[Node],
    used: Mapping[str, Mapping[str, int]],
    pods: Sequence[Pod],
    owners: DomainOwners | None = None,
) -> dict[str, str | None]:
    """Bind pods in order to the best-scoring feasible node; None where no node fits. Ties go
    to the first node in name order.

    `owners`: the exclusive domains bound pods already hold."""
    node_list = sorted(nodes, key=lambda n: n.name)
    usage = {name: dict(amounts) for name, amounts in used.items()}
    for node in node_list:
        usage.setdefault(node.name, {})
    exclusivity = _Exclusivity(owners or {})
    shapes: dict[tuple[object, ...], _Shape] = {}
    landed: list[str] = []
    bindings: dict[str, str | None] = {}
    for pod in pods:
        key = _shape_key(pod)
        try:
            shape = shapes[key]
        except KeyError:
            shape = shapes[key] = _Shape(pod, node_list, usage, len(landed))
        except TypeError:  # an unhashable selector: nothing to share
            shape = _Shape(pod, node_list, usage, len(landed))
        else:
            shape.refresh(landed, usage)
        best = shape.best(pod, exclusivity)
        bindings[pod.key] = best.name if best else None
        if best is not None:
            exclusivity.bind(pod, best)
            node_used = usage[best.name]
            for resource, amount in shape.charge:
                node_used[resource] = node_used.get(resource, 0) + amount
            landed.append(best.name)
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
