"""Partial admission (feature gate PartialAdmission, beta, on): a PodSet with `min_count`
shrinks until the workload fits.

Follows Kueue `pkg/scheduler/scheduler.go` getInitialAssignments and
`pkg/scheduler/flavorassigner/podset_reducer.go`; the cases are those of
`scheduler_test.go` TestSchedule ("partial admission ...") and `podset_reducer_test.go`
TestSearch.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler import (
    Admission,
    PendingReason,
    PodSet,
    PodSetAssignment,
    Workload,
    schedule,
)
from scheduler.model import SchedulingConfig
from scheduler.partial import search
from tests.unit.scheduler.builders import (
    CPU,
    LOWER,
    Result,
    admitted,
    cq,
    gpu_cq,
    pod_set,
    run,
    snapshot,
    wl,
)

SALES = cq("sales", {"default": {"cpu": 50 * CPU}})


def cpu_set(name: str, count: int, min_count: int | None = None, cpu: int = 1) -> PodSet:
    return pod_set(name=name, count=count, min_count=min_count, requests={"cpu": cpu * CPU})


def test_single_pod_set_shrinks_to_the_largest_count_that_fits():
    """TestSchedule "partial admission single variable pod set": 50 pods of 2 CPU, at least
    20, in 50 CPU: 25 pods are admitted, and only their quota is taken."""
    result = run([SALES], [wl("new", "sales", pod_sets=[cpu_set("one", 50, 20, cpu=2)])])
    assert result.counts("new") == {"one": 25}


def test_every_variable_pod_set_gives_up_pods_in_proportion():
    """TestSchedule "partial admission multiple variable pod sets": fixed 20, 30 (min 10) and
    15 (min 5) pods of 1 CPU in 50 CPU are admitted as 20, 20 and 10."""
    pod_sets = [cpu_set("one", 20), cpu_set("two", 30, 10), cpu_set("three", 15, 5)]
    result = run([SALES], [wl("new", "sales", pod_sets=pod_sets)])
    assert result.counts("new") == {"one": 20, "two": 20, "three": 10}


def test_disabled_partial_admission_leaves_the_workload_pending():
    """TestSchedule "partial admission disabled, multiple variable pod sets": ExceedsMaxQuota."""
    pod_sets = [cpu_set("one", 20), cpu_set("two", 30, 10), cpu_set("three", 15, 5)]
    state = snapshot([SALES], [wl("new", "sales", pod_sets=pod_sets)])
    off = replace(state, config=SchedulingConfig(partial_admission=False))
    result = Result(schedule(off))
    assert result.admitted == []
    assert result.reason("new") == PendingReason.EXCEEDS_MAX_QUOTA


def test_without_min_count_nothing_shrinks():
    result = run([SALES], [wl("new", "sales", pod_sets=[cpu_set("one", 51)])])
    assert result.admitted == []
    assert result.reason("new") == PendingReason.EXCEEDS_MAX_QUOTA


def test_preemption_at_full_count_wins_over_shrinking():
    """TestSchedule "partial admission single variable pod set, preempt first": 20 GPUs (at
    least 10) where 10 of 20 are used by a lower priority workload: it preempts it to run
    all 20 rather than starting 10 at once."""
    queue = gpu_cq("eng-beta", 20, within=LOWER)
    pending = wl("new", "eng-beta", priority=4, pod_sets=[pod_set(1, 20, min_count=10)])
    result = run([queue], [pending, admitted("old", "eng-beta", 1, count=10, priority=-4)])
    assert result.preemptors == {"new": {"old"}}
    assert result.admitted == []


def test_shrinking_may_still_need_preemption():
    """TestSchedule "partial admission single variable pod set, preempt with partial
    admission": 30 GPUs (at least 10) exceed the 20 the queue can ever have; at 20 it fits by
    preempting the lower priority workload, which it does."""
    queue = gpu_cq("eng-beta", 20, within=LOWER)
    pending = wl("new", "eng-beta", priority=4, pod_sets=[pod_set(1, 30, min_count=10)])
    old = admitted("old", "eng-beta", 1, count=10, priority=-4)
    result = run([queue], [pending, old])
    assert result.preemptors == {"new": {"old"}}
    # Once the victim is gone the next call admits it with the 20 it preempted for.
    after = run([queue], [pending])
    assert after.counts("new") == {"main": 20}


def test_shrinking_instead_of_preempting_when_preemption_finds_no_candidates():
    """getInitialAssignments: the full count needs preemption but nothing can be preempted
    (same priority), so the reduced count that fits now is admitted."""
    queue = gpu_cq("q", 20, within=LOWER)
    pending = wl("new", "q", pod_sets=[pod_set(1, 20, min_count=5)])
    result = run([queue], [pending, admitted("old", "q", 1, count=10)])
    assert result.victims == {}
    assert result.counts("new") == {"main": 10}


def test_quota_held_follows_the_admitted_count():
    """A partially admitted workload holds the quota of the pods admitted, not of its spec:
    of 50 CPU, 25 two-CPU pods of 50 leave nothing, 20 leave 10 CPU."""
    spec = (cpu_set("one", 50, 20, cpu=2),)

    def holding(count: int) -> Workload:
        assignment = PodSetAssignment("one", {"cpu": "default"}, count)
        return Workload("big", "sales", 0, -1.0, spec, admission=Admission("sales", (assignment,)))

    small = wl("small", "sales", pod_sets=[cpu_set("one", 10)])
    assert run([SALES], [holding(25), small]).admitted == []
    assert run([SALES], [holding(20), small]).admitted == ["small"]


@pytest.mark.parametrize(
    ("counts", "min_counts", "limit", "want"),
    [
        # podset_reducer_test.go TestSearch cases: total pods found under `limit`.
        ((1, 2), (None, 2), 2, None),  # "partial not available"
        ((5, 5, 5, 5), (3, 4, 1, 2), 15, 15),  # "partial available"
        ((5, 5, 5, 5), (3, None, None, None), 19, 19),  # "one partial available"
        ((5, 5, 5, 5), (3, 4, 1, 2), 10, 10),  # "to min"
        ((5, 5, 5, 5), (3, 4, 1, 2), 20, 20),  # "to max"
        ((150_000,) * 8, (1,) * 8, 150_000, 150_000),  # "no overflow"
        ((0,), (0,), 0, None),  # "podset with replica count 0"
        ((5, 5), (3, 4), 6, None),  # below every min_count: nothing fits
    ],
)
def test_reducer_search_finds_the_largest_total_under_the_limit(counts, min_counts, limit, want):
    pod_sets = [
        pod_set(0, count, name=f"ps{i}", min_count=minimum)
        for i, (count, minimum) in enumerate(zip(counts, min_counts, strict=True))
    ]

    def fits(chosen: dict[str, int]) -> int | None:
        total = sum(chosen.values())
        return total if total <= limit else None

    assert search(pod_sets, fits) == want


def test_reducer_never_goes_below_min_count():
    pod_sets = [pod_set(0, 10, name="a", min_count=4), pod_set(0, 6, name="b", min_count=6)]
    seen: list[dict[str, int]] = []

    def fits(chosen: dict[str, int]) -> dict[str, int] | None:
        seen.append(chosen)
        return None

    assert search(pod_sets, fits) is None
    assert min(c["a"] for c in seen) == 4
    assert {c["b"] for c in seen} == {6}
