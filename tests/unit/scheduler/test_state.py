"""ClusterState bookkeeping: batched release and hold, and what it caches per workload."""

from __future__ import annotations

from dataclasses import replace

from scheduler.state import ClusterState
from tests.unit.scheduler.builders import GPU, admitted, cohort, cq, quota, snapshot


def _state() -> ClusterState:
    """Two levels of cohorts and lending limits, so that usage climbs the tree unevenly."""
    queues = [
        cq("a", {"default": {"gpu": quota(4 * GPU, lend=1 * GPU)}}, cohort="team"),
        cq("b", {"default": {"gpu": quota(2 * GPU)}}, cohort="team"),
        cq("c", {"default": {"gpu": quota(4 * GPU, lend=2 * GPU)}}, cohort="web"),
    ]
    holders = [
        admitted("a1", "a", 3),
        admitted("a2", "a", 2),
        admitted("b1", "b", 3),
        admitted("c1", "c", 1),
        admitted("c2", "c", 4),
    ]
    cohorts = [cohort("team", parent="org"), cohort("web", parent="org"), cohort("org")]
    return ClusterState(snapshot(queues, holders, cohorts=cohorts))


def _usage(state: ClusterState) -> dict[object, int]:
    tree = state.tree
    return {(key, fr): tree.usage(key, fr) for key in tree.nodes() for fr in tree.subtree_frs(key)}


def test_release_all_charges_the_tree_as_releasing_one_by_one() -> None:
    batched, single = _state(), _state()
    keys = ["a1", "c2", "b1", "a2"]
    gone = batched.release_all(keys)
    for key in keys:
        single.release(key)
    assert _usage(batched) == _usage(single)
    assert batched.admitted.keys() == single.admitted.keys() == {"c1"}
    assert [w.key for w in gone] == keys


def test_hold_all_restores_what_release_all_took() -> None:
    state = _state()
    before = _usage(state)
    state.hold_all(state.release_all(["c1", "a2", "b1"]))
    assert _usage(state) == before
    assert set(state.admitted) == {"a1", "a2", "b1", "c1", "c2"}
    assert {k for _, keys in state.queues_in_tree_of("a") for k in keys} == set(state.admitted)


def test_a_replaced_workload_is_charged_its_own_usage() -> None:
    """Usage is cached per workload object: another object under the same key is not it."""
    state = _state()
    old = state.admitted["a1"]
    state.release("a1")
    state.hold(replace(old, pod_sets=admitted("a1", "a", 1).pod_sets))
    assert state.usage["a1"] == {("default", "gpu"): 1 * GPU}
    state.release("a1")
    state.hold(old)
    assert state.usage["a1"] == {("default", "gpu"): 3 * GPU}
    assert _usage(state) == _usage(_state())
