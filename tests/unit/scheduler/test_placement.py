"""Binding admitted pods to nodes the way kube-scheduler filters and scores them.

Tests -> kueue-semantics §16 checklist items: none. Placement is kube-scheduler's job after
Kueue admits (item 10, TAS, is out of scope); these cover its filters and scoring:
  node selector   test_pod_goes_to_a_node_matching_its_node_selector
                  test_pod_with_an_unsatisfiable_node_selector_stays_unbound
  affinity        test_required_affinity_terms_are_ored_and_their_expressions_anded
                  test_empty_affinity_term_matches_no_node
  taints          test_untolerated_no_schedule_and_no_execute_taints_keep_pods_off
                  test_prefer_no_schedule_taint_does_not_keep_pods_off
                  test_tolerated_taint_lets_the_pod_in
  capacity        test_pod_does_not_fit_a_node_without_enough_free_capacity
                  test_pods_bind_in_order_and_use_up_capacity
                  test_pod_requesting_a_resource_the_node_lacks_does_not_fit
  pods limit      test_pods_limit_caps_pods_per_node
  readiness       test_not_ready_node_gets_no_pods
  scoring         test_least_allocated_spreads_pods_over_equal_nodes
                  test_least_allocated_prefers_the_emptier_node
  exclusive       test_each_exclusive_group_takes_a_domain_of_its_own
                  test_a_group_follows_its_first_pod_into_its_domain
                  test_domains_held_by_bound_groups_stay_theirs
                  test_nodes_without_the_topology_label_take_no_exclusive_pods
  why unbound     test_why_unplaced_counts_each_node_under_the_filter_that_rejects_it
                  test_why_unplaced_is_none_while_a_node_would_take_the_pod
"""

from __future__ import annotations

from typing import Any

from scheduler import Node, Pod, Taint, Toleration, place, why_unplaced
from tests.unit.scheduler.builders import GPU, req

CPU = 1000


def node(
    name: str,
    gpu: int = 8,
    *,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    pods: int = 110,
    ready: bool = True,
) -> Node:
    return Node(
        name, labels or {}, taints, {"gpu": gpu * GPU, "cpu": 32 * CPU, "pods": pods * 1000}, ready
    )


def pod(key: str, gpu: int = 1, **kwargs: Any) -> Pod:
    return Pod(key, {"gpu": gpu * GPU}, **kwargs)


def test_pod_goes_to_a_node_matching_its_node_selector():
    nodes = [node("n1", labels={"accel": "a100"}), node("n2", labels={"accel": "h100"})]
    assert place(nodes, {}, [pod("p", node_selector={"accel": "h100"})]) == {"p": "n2"}


def test_pod_with_an_unsatisfiable_node_selector_stays_unbound():
    assert place([node("n1")], {}, [pod("p", node_selector={"accel": "tpu"})]) == {"p": None}


def test_required_affinity_terms_are_ored_and_their_expressions_anded():
    nodes = [
        node("n1", labels={"accel": "h100", "zone": "a"}),
        node("n2", labels={"accel": "h100", "zone": "b"}),
        node("n3", labels={"accel": "a100", "zone": "c"}),
    ]
    affinity = (
        (req("accel", "In", "h100"), req("zone", "NotIn", "a")),
        (req("zone", "In", "c"),),
    )
    bound = place(
        nodes, {}, [pod("p1", required_affinity=affinity), pod("p2", required_affinity=affinity)]
    )
    assert {bound["p1"], bound["p2"]} == {"n2", "n3"}


def test_empty_affinity_term_matches_no_node():
    assert place([node("n1")], {}, [pod("p", required_affinity=((),))]) == {"p": None}


def test_untolerated_no_schedule_and_no_execute_taints_keep_pods_off():
    nodes = [
        node("n1", taints=(Taint("gpu", "yes", "NoSchedule"),)),
        node("n2", taints=(Taint("maint", "", "NoExecute"),)),
    ]
    assert place(nodes, {}, [pod("p")]) == {"p": None}


def test_prefer_no_schedule_taint_does_not_keep_pods_off():
    nodes = [node("n1", taints=(Taint("spot", "true", "PreferNoSchedule"),))]
    assert place(nodes, {}, [pod("p")]) == {"p": "n1"}


def test_tolerated_taint_lets_the_pod_in():
    nodes = [node("n1", taints=(Taint("gpu", "yes", "NoSchedule"),))]
    tolerations = (Toleration("gpu", "Equal", "yes", "NoSchedule"),)
    assert place(nodes, {}, [pod("p", tolerations=tolerations)]) == {"p": "n1"}


def test_pod_does_not_fit_a_node_without_enough_free_capacity():
    used = {"n1": {"gpu": 6 * GPU}}
    assert place([node("n1", gpu=8)], used, [pod("p", 3)]) == {"p": None}
    assert place([node("n1", gpu=8)], used, [pod("p", 2)]) == {"p": "n1"}


def test_pods_bind_in_order_and_use_up_capacity():
    bound = place([node("n1", gpu=4)], {}, [pod("first", 3), pod("second", 3)])
    assert bound == {"first": "n1", "second": None}


def test_pods_limit_caps_pods_per_node():
    bound = place([node("n1", pods=2)], {}, [pod(f"p{i}", 0) for i in range(3)])
    assert bound == {"p0": "n1", "p1": "n1", "p2": None}


def test_pod_requesting_a_resource_the_node_lacks_does_not_fit():
    p = Pod("p", {"google.com/tpu": 4 * 1000})
    assert place([node("n1")], {}, [p]) == {"p": None}


def test_not_ready_node_gets_no_pods():
    assert place([node("n1", ready=False)], {}, [pod("p")]) == {"p": None}


def test_least_allocated_spreads_pods_over_equal_nodes():
    bound = place([node("n1"), node("n2")], {}, [pod("p1", 2), pod("p2", 2)])
    assert {bound["p1"], bound["p2"]} == {"n1", "n2"}


def test_least_allocated_prefers_the_emptier_node():
    used = {"n1": {"gpu": 4 * GPU}}
    assert place([node("n1"), node("n2")], used, [pod("p", 2)]) == {"p": "n2"}


POOL = "cloud.google.com/gke-nodepool"


def pools(*sizes: int) -> list[Node]:
    """Nodes with 2 GPUs each, `sizes[i]` of them in pool p<i>."""
    return [
        node(f"p{i}-{n}", gpu=2, labels={POOL: f"p{i}"})
        for i, size in enumerate(sizes)
        for n in range(size)
    ]


def test_each_exclusive_group_takes_a_domain_of_its_own() -> None:
    jobs = [pod(f"job{j}-{k}", 1, exclusive=(POOL, f"job{j}")) for j in range(3) for k in range(2)]
    bindings = place(pools(2, 2), {}, jobs)
    domain = {j: {bindings[f"job{j}-{k}"] for k in range(2)} for j in range(3)}
    assert {b[:2] for b in domain[0]} != {b[:2] for b in domain[1]}
    assert len({b[:2] for b in domain[0]}) == 1
    assert len({b[:2] for b in domain[1]}) == 1
    # Two pools, three Jobs: the third waits although the pools have free GPUs.
    assert domain[2] == {None}


def test_a_group_follows_its_first_pod_into_its_domain() -> None:
    # p0 has room for one pod only; the group's second pod may not spill into p1.
    bindings = place(
        pools(1, 1),
        {"p0-0": {"gpu": 1 * GPU}},
        [pod(f"a{k}", 1, exclusive=(POOL, "a")) for k in range(2)],
    )
    placed = [b for b in bindings.values() if b]
    assert len({b[:2] for b in placed}) == 1


def test_domains_held_by_bound_groups_stay_theirs() -> None:
    bindings = place(
        pools(1, 1), {}, [pod("b0", 1, exclusive=(POOL, "b"))], owners={(POOL, "p0"): "a"}
    )
    assert bindings["b0"] == "p1-0"
    own = place(pools(1, 1), {}, [pod("a1", 1, exclusive=(POOL, "a"))], owners={(POOL, "p1"): "a"})
    assert own["a1"] == "p1-0"


def test_nodes_without_the_topology_label_take_no_exclusive_pods() -> None:
    assert place([node("plain")], {}, [pod("x", 1, exclusive=(POOL, "x"))]) == {"x": None}
    # Pods of ordinary workloads ignore exclusivity (JobSet's anti-affinity names its own pods).
    assert place(pools(1), {}, [pod("y", 1)], owners={(POOL, "p0"): "a"}) == {"y": "p0-0"}


def test_why_unplaced_counts_each_node_under_the_filter_that_rejects_it() -> None:
    """kube-scheduler's FailedScheduling message (framework.FitError.Error): reasons sorted,
    a node under the first failing filter, under each resource it lacks."""
    nodes = [
        node("down", ready=False),
        node("tainted", taints=(Taint("nvidia.com/gpu", "present"),)),
        node("cpu-only", labels={"accel": "none"}),
        node("full", labels={"accel": "l4"}, gpu=1, pods=1),
        node("full-2", labels={"accel": "l4"}, gpu=1),
    ]
    used = {"full": {"gpu": GPU, "pods": 1000}, "full-2": {"gpu": GPU}}
    waiting = pod("p", node_selector={"accel": "l4"})

    assert why_unplaced(waiting, nodes, used) == (
        "0/5 nodes are available: 1 Too many pods, 1 node(s) didn't match Pod's node "
        "affinity/selector, 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) had untolerated taint {nvidia.com/gpu: present}, 2 Insufficient gpu."
    )
    assert place(nodes, used, [waiting]) == {"p": None}


def test_why_unplaced_is_none_while_a_node_would_take_the_pod() -> None:
    assert why_unplaced(pod("p"), [node("n1", ready=False), node("n2")], {}) is None
    assert why_unplaced(pod("p"), [], {}) == "no nodes available to schedule pods"
