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
"""

from __future__ import annotations

from typing import Any

from scheduler import Node, Pod, Taint, Toleration, place
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
