"""A ClusterQueue covering `pods` counts one per pod, for admitted workloads as for new ones.

Kueue `pkg/scheduler/flavorassigner/flavorassigner.go: assignFlavors` sets each PodSet's
`pods` request to its count when the ClusterQueue covers `pods`; the admission's
`resourceUsage` then carries it, and the cache charges it like any resource
(TestAssignFlavors cases "num pods fit" / "num pods don't fit").
"""

from __future__ import annotations

from scheduler import Admission, PodSetAssignment, Workload, assignment_usage
from tests.unit.scheduler.builders import GPU, cq, pod_set, run, wl

PODS_AND_GPUS = {"default": {"gpu": 8 * GPU, "pods": 3_000}}


def holding(key: str, count: int) -> Workload:
    """A workload of `count` one-GPU pods admitted on flavor default, `pods` included."""
    sets = (pod_set(1, count),)
    assignment = PodSetAssignment("main", {"gpu": "default", "pods": "default"}, count)
    return Workload(key, "a", 0, -100.0, sets, admission=Admission("a", (assignment,)))


def test_an_admitted_workload_holds_one_pod_of_quota_per_pod():
    """TestAssignFlavors "num pods fit": Usage has pods = count (3) beside cpu."""
    usage = assignment_usage(holding("w", 3).pod_sets, holding("w", 3).admission.pod_sets)
    assert usage == {("default", "gpu"): 3 * GPU, ("default", "pods"): 3_000}


def test_pods_held_by_an_admitted_workload_leave_less_for_the_next():
    """assignFlavors: 2 pods held + 2 asked > the 3 pods of quota; before, the held pods
    counted 0 and the second workload was admitted past the quota."""
    result = run([cq("a", PODS_AND_GPUS)], [holding("old", 2), wl("new", "a", 1, count=2)])
    assert result.admitted == []
    assert result.reason("new") == "WaitingForQuota"


def test_pods_admitted_in_one_call_count_against_the_rest_of_that_call():
    """Two workloads of 2 pods each, 3 pods of quota: only the first gets in, in any cycle."""
    result = run(
        [cq("a", PODS_AND_GPUS)],
        [wl("first", "a", 1, count=2), wl("second", "a", 1, count=2, created=1.0)],
    )
    assert result.admitted == ["first"]
    assert "second" in result.pending
