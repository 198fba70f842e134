"""`place` caches filters and scores per pod shape; it must bind exactly as the plain scan.

The reference below is kube-scheduler's loop as `place` first wrote it: every (pod, node) pair
filtered and scored from scratch, the first node in name order with the strictly highest score
taking the pod. Random clusters and batches (shared shapes, exclusive groups, taints, ties,
over-asked `pods`) must get identical bindings from both.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

import pytest

from scheduler import Node, NodeSelectorRequirement, Pod, Taint, Toleration, place
from scheduler.model import POD, PODS


def reference_place(
    nodes: Iterable[Node],
    used: Mapping[str, Mapping[str, int]],
    pods: Sequence[Pod],
    owners: Mapping[tuple[str, str], str] | None = None,
) -> dict[str, str | None]:
    usage = {name: dict(amounts) for name, amounts in used.items()}
    owner = dict(owners or {})
    domain = {(key, group): value for (key, value), group in (owners or {}).items()}

    def matches(pod: Pod, node: Node) -> bool:
        if not node.ready:
            return False
        for taint in node.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not any(
                t.tolerates(taint) for t in pod.tolerations
            ):
                return False
        if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
            return False
        return not pod.required_affinity or any(
            term and all(r.matches(node.labels) for r in term) for term in pod.required_affinity
        )

    def fits(pod: Pod, node: Node, used: Mapping[str, int]) -> bool:
        return not any(
            amount and used.get(r, 0) + amount > node.allocatable.get(r, 0)
            for r, amount in {**pod.requests, PODS: POD}.items()
        )

    def allows(pod: Pod, node: Node) -> bool:
        if pod.exclusive is None:
            return True
        key, group = pod.exclusive
        value = node.labels.get(key)
        if value is None:
            return False
        if (key, group) in domain:
            return value == domain[(key, group)]
        return owner.get((key, value), group) == group

    def score(pod: Pod, node: Node, used: Mapping[str, int]) -> float:
        resources = [r for r, v in pod.requests.items() if v] or [PODS]
        free = [
            (node.allocatable.get(r, 0) - used.get(r, 0) - pod.requests.get(r, 0))
            / max(1, node.allocatable.get(r, 0))
            for r in resources
        ]
        return sum(free) / len(free)

    node_list = sorted(nodes, key=lambda n: n.name)
    bindings: dict[str, str | None] = {}
    for pod in pods:
        best, best_score = None, -1.0
        for node in node_list:
            node_used = usage.setdefault(node.name, {})
            if matches(pod, node) and fits(pod, node, node_used) and allows(pod, node):
                s = score(pod, node, node_used)
                if s > best_score:
                    best, best_score = node, s
        bindings[pod.key] = best.name if best else None
        if best is not None:
            if pod.exclusive is not None:
                key, group = pod.exclusive
                owner[(key, best.labels[key])] = group
                domain[(key, group)] = best.labels[key]
            for r, amount in {**pod.requests, PODS: POD}.items():
                usage[best.name][r] = usage[best.name].get(r, 0) + amount
    return bindings


TAINTS = (
    Taint("gpu", "true", "NoSchedule"),
    Taint("spot", "", "NoExecute"),
    Taint("busy", "", "PreferNoSchedule"),
)
TOLERATIONS = (
    Toleration("gpu", "Equal", "true"),
    Toleration("spot", "Exists"),
    Toleration("", "Exists"),
    Toleration("gpu", "Equal", "false", "NoSchedule"),
)
REQUIREMENTS = (
    NodeSelectorRequirement("zone", "In", ("a", "b")),
    NodeSelectorRequirement("zone", "NotIn", ("c",)),
    NodeSelectorRequirement("pool", "Exists"),
    NodeSelectorRequirement("rack", "DoesNotExist"),
    NodeSelectorRequirement("size", "Gt", ("2",)),
)


def random_node(rng: random.Random, names: list[str]) -> Node:
    labels = {"zone": rng.choice("abc"), "size": str(rng.randint(0, 5))}
    if rng.random() < 0.6:
        labels["pool"] = rng.choice(("x", "y"))
    if rng.random() < 0.7:
        labels["rack"] = f"r{rng.randint(0, 3)}"
    allocatable = {
        "cpu": rng.choice((0, 1000, 4000, 8000, 16000)),
        "memory": rng.choice((1 << 30, 4 << 30, 16 << 30)),
    }
    if rng.random() < 0.4:
        allocatable["gpu"] = rng.choice((1000, 4000, 8000))
    if rng.random() < 0.8:
        allocatable[PODS] = rng.randint(0, 8) * POD
    # Now and then a duplicate name: both nodes share one usage, as in `place`.
    name = rng.choice(names) if names and rng.random() < 0.05 else f"n{rng.randint(0, 99):02}"
    names.append(name)
    taints = tuple(t for t in TAINTS if rng.random() < 0.15)
    return Node(name, labels, taints, allocatable, ready=rng.random() < 0.93)


def random_shape(rng: random.Random) -> dict[str, object]:
    requests: dict[str, int] = {}
    for resource in rng.sample(("cpu", "memory", "gpu", PODS), rng.randint(0, 3)):
        if resource == PODS:
            requests[PODS] = rng.choice((0, POD, 20 * POD))  # over-asked: scores below -1
        elif resource == "memory":
            requests[resource] = rng.choice((0, 1 << 28, 1 << 30))
        else:
            requests[resource] = rng.choice((0, 500, 1000, 2000))
    shape: dict[str, object] = {"requests": requests}
    if rng.random() < 0.2:
        shape["node_selector"] = {"zone": rng.choice("abc")}
    if rng.random() < 0.2:
        shape["required_affinity"] = tuple(
            tuple(rng.sample(REQUIREMENTS, rng.randint(0, 2))) for _ in range(rng.randint(1, 2))
        )
    if rng.random() < 0.3:
        shape["tolerations"] = tuple(rng.sample(TOLERATIONS, rng.randint(1, 2)))
    return shape


def random_case(
    rng: random.Random,
) -> tuple[list[Node], dict[str, dict[str, int]], list[Pod], dict[tuple[str, str], str]]:
    names: list[str] = []
    nodes = [random_node(rng, names) for _ in range(rng.randint(0, 14))]
    used = {
        name: {r: rng.randint(0, 4) * 1000 for r in rng.sample(("cpu", "gpu", PODS), 2)}
        for name in rng.sample(names + ["gone"], rng.randint(0, len(names) // 2 + 1))
    }
    shapes = [random_shape(rng) for _ in range(rng.randint(1, 4))]
    groups = [("rack", f"g{i}") for i in range(3)] + [("zone", "z0")]
    pods = []
    for i in range(rng.randint(0, 60)):
        shape = rng.choice(shapes) if rng.random() < 0.85 else random_shape(rng)
        exclusive = rng.choice(groups) if rng.random() < 0.2 else None
        pods.append(Pod(f"p{i}", exclusive=exclusive, **shape))  # type: ignore[arg-type]
    owners = {("rack", f"r{rng.randint(0, 3)}"): "g0"} if rng.random() < 0.3 else {}
    return nodes, used, pods, owners


@pytest.mark.parametrize("chunk", range(10))
def test_place_binds_as_the_plain_scan_does(chunk: int) -> None:
    for seed in range(chunk * 300, (chunk + 1) * 300):
        nodes, used, pods, owners = random_case(random.Random(seed))
        expected = reference_place(nodes, used, pods, owners)
        assert place(nodes, used, pods, owners) == expected, f"seed {seed}"


def test_a_deep_batch_of_one_shape_spreads_as_the_plain_scan_does() -> None:
    nodes = [Node(f"n{i:02}", {}, (), {"cpu": 125_000, PODS: 110 * POD}) for i in range(40)]
    used = {"n03": {"cpu": 7000, PODS: 2 * POD}, "n17": {"cpu": 1000}}
    pods = [Pod(f"p{i}", {"cpu": 1000, "memory": 0}) for i in range(4000)]
    bound = place(nodes, used, pods)
    assert bound == reference_place(nodes, used, pods)
    assert sum(target is None for target in bound.values()) == 0
