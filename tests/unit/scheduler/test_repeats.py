"""Heads of one shape reuse a Fit (`nomination.Repeats`) only while it is the answer.

The snapshot shares one PodSets object among workloads of one shape; each scenario is
scheduled once with shared PodSets (Fits reused) and once with a copy per workload (every
head assigned afresh), and the decisions must be the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from scheduler import ClusterQueue, Cohort, PodSet, Workload, nomination, schedule
from scheduler.flavors import Assignment
from tests.unit.scheduler.builders import (
    CPU,
    LOWER,
    STRICT,
    admitted,
    cohort,
    cq,
    gpu_cq,
    pod_set,
    quota,
    snapshot,
    wl,
)

Scenario = tuple[list[ClusterQueue], list[Workload], list[Cohort]]


def _queue(cq_name: str, pod_sets: tuple[PodSet, ...], n: int, priority: int = 0) -> list[Workload]:
    return [
        wl(
            f"{cq_name}-{priority}-{i:02d}",
            cq_name,
            priority=priority,
            created=float(i),
            pod_sets=pod_sets,
        )
        for i in range(n)
    ]


def _borrowing() -> Scenario:
    """Own quota first, then borrowed, then none left."""
    queues = [gpu_cq("a", 3, cohort="c"), gpu_cq("b", 3, cohort="c")]
    return queues, _queue("a", (pod_set(1),), 9), []


def _within_limits() -> Scenario:
    """A borrowing limit stops the reuse before the cohort runs dry."""
    queues = [
        cq("a", {"default": {"gpu": quota(2_000, borrow=1_000)}}, cohort="c"),
        gpu_cq("b", 4, cohort="c"),
    ]
    return queues, _queue("a", (pod_set(1),), 6), []


def _partial() -> Scenario:
    """A partial admission is never reused: a full-count Fit may follow it."""
    queues = [cq("a", {"default": {"cpu": 10 * CPU}})]
    shape = (pod_set(name="main", count=4, min_count=1, requests={"cpu": CPU}),)
    return queues, _queue("a", shape, 4), []


def _preemption() -> Scenario:
    """Once the quota is taken, high-priority heads preempt instead."""
    queues = [gpu_cq("a", 4, within=LOWER)]
    low = [admitted(f"low-{i}", "a", 1, priority=-1) for i in range(2)]
    return queues, low + _queue("a", (pod_set(1),), 4, priority=5), []


def _strict_cohort_root() -> Scenario:
    """StrictFIFO over a cohort with quota of its own, two resources per pod."""
    queues = [
        cq("a", {"default": {"cpu": 2 * CPU, "gpu": 2_000}}, cohort="c", strategy=STRICT),
        cq("b", {"default": {"cpu": 2 * CPU, "gpu": 2_000}}, cohort="c"),
    ]
    shape = (pod_set(requests={"cpu": CPU, "gpu": 1_000}),)
    return (
        queues,
        _queue("a", shape, 4) + _queue("b", shape, 4),
        [cohort("c", flavors={"default": {"cpu": 2 * CPU, "gpu": 2_000}})],
    )


def _copied(workloads: list[Workload]) -> list[Workload]:
    return [replace(w, pod_sets=tuple(replace(ps) for ps in w.pod_sets)) for w in workloads]


@pytest.mark.parametrize(
    "scenario", [_borrowing, _within_limits, _partial, _preemption, _strict_cohort_root]
)
def test_reused_fits_decide_as_fresh_assignments(
    scenario: Callable[[], Scenario], monkeypatch: pytest.MonkeyPatch
) -> None:
    queues, workloads, cohorts = scenario()
    fresh = schedule(snapshot(queues, _copied(workloads), cohorts=cohorts))
    reused = _counting_reuses(monkeypatch)
    shared = schedule(snapshot(queues, workloads, cohorts=cohorts))
    assert shared == fresh
    assert reused, "the scenario should reuse a Fit"


def _counting_reuses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reused: list[str] = []
    get = nomination.Repeats.get

    def counting(
        self: nomination.Repeats, workload: Workload, queue: ClusterQueue
    ) -> Assignment | None:
        found = get(self, workload, queue)
        if found is not None:
            reused.append(workload.key)
        return found

    monkeypatch.setattr(nomination.Repeats, "get", counting)
    return reused
