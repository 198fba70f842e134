"""Fair sharing (Dominant Resource Share ordering and preemption) and admission fair sharing.

Each test names the Kueue test case it follows:
- `pkg/cache/scheduler/fair_sharing_test.go` TestDominantResourceShare,
- `pkg/scheduler/preemption/preemption_fair_test.go` TestFairPreemptions,
- `pkg/scheduler/scheduler_fs_test.go` TestScheduleForFairSharing,
- `pkg/scheduler/scheduler_afs_test.go` TestScheduleForAFS,
- `pkg/util/admissionfairsharing/admission_fair_sharing_test.go`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

import pytest

from scheduler import ClusterQueue, Cohort, Snapshot, Workload, schedule
from scheduler.fairsharing import alpha, drs, entry_penalty, local_queue_usage, shares
from scheduler.model import AdmissionFairSharing, SchedulingConfig
from scheduler.preemption import find_targets
from scheduler.state import ClusterState
from tests.unit.scheduler.builders import (
    ANY,
    CPU,
    LOWER,
    Result,
    admitted,
    cohort,
    cq,
    quota,
    snapshot,
    wl,
)

FAIR = SchedulingConfig(fair_sharing=True)
GPU_RES = "example.com/gpu"


def fair(snap: Snapshot, config: SchedulingConfig = FAIR) -> Snapshot:
    return replace(snap, config=config)


def weighted(queue: ClusterQueue | Cohort, weight: float) -> ClusterQueue | Cohort:
    return replace(queue, fair_weight=weight)


def cpu_wl(key: str, queue: str, cpus: float, **kwargs: object) -> Workload:
    return admitted(key, queue, requests={"cpu": int(cpus * CPU)}, **kwargs)  # type: ignore[arg-type]


# -- DominantResourceShare (fair_sharing_test.go TestDominantResourceShare) ---------------------


def _drs_state(
    usage: dict[str, int], queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort] = ()
) -> ClusterState:
    holder = admitted("w", "cq", requests=usage)
    return ClusterState(fair(snapshot(queues, [holder], cohorts=cohorts)))


def test_share_is_zero_without_a_cohort_or_below_nominal():
    """Cases "no cohort" and "usage below nominal"."""
    alone = _drs_state({"cpu": 1000}, [cq("cq", {"default": {"cpu": 2000}})])
    assert drs(alone, ("cq", "cq")).share == 0
    below = _drs_state(
        {"cpu": 1000, GPU_RES: 2000},
        [
            cq("cq", {"default": {"cpu": 2000, GPU_RES: 5000}}, cohort="c"),
            cq("lending-cq", {"default": {"cpu": 8000, GPU_RES: 5000}}, cohort="c"),
        ],
    )
    assert drs(below, ("cq", "cq")).share == 0
    assert not drs(below, ("cq", "cq")).borrowing


def test_share_is_the_dominant_borrowed_resource_over_what_the_cohort_can_lend():
    """Case "usage above nominal": cpu (3-2)/10, gpu (7-5)/10 -> gpu dominates, 200."""
    state = _drs_state(
        {"cpu": 3000, GPU_RES: 7000},
        [
            cq("cq", {"default": {"cpu": 2000, GPU_RES: 5000}}, cohort="c"),
            cq("lending-cq", {"default": {"cpu": 8000, GPU_RES: 5000}}, cohort="c"),
        ],
    )
    share = drs(state, ("cq", "cq"))
    assert (share.share, share.resource, share.borrowing) == (200, GPU_RES, True)
    assert drs(state, ("cq", "lending-cq")).share == 0
    assert drs(state, ("cohort", "c")).share == 0


def test_zero_weight_borrowing_share_is_infinite():
    """Case "above nominal with zero weight" (Kueue rounds it to MaxInt)."""
    state = _drs_state(
        {GPU_RES: 7000},
        [
            weighted(cq("cq", {"default": {GPU_RES: 5000}}, cohort="c"), 0),  # type: ignore[list-item]
            cq("lending-cq", {"default": {GPU_RES: 10000}}, cohort="c"),
        ],
    )
    assert math.isinf(drs(state, ("cq", "cq")).share)


def test_cohort_share_is_divided_by_its_weight():
    """Case "cohort has resource share": cq 5/50 -> 100; child-cohort weight 2 -> 50."""
    state = _drs_state(
        {GPU_RES: 10000},
        [cq("cq", {"default": {GPU_RES: 5000}}, cohort="child")],
        [
            weighted(cohort("child", "root"), 2),  # type: ignore[list-item]
            cohort("root", flavors={"default": {GPU_RES: 45000}}),
        ],
    )
    assert drs(state, ("cq", "cq")).share == 100
    assert drs(state, ("cohort", "child")).share == 50
    assert drs(state, ("cohort", "root")).share == 0


def test_borrowing_limit_bounds_what_can_be_lent():
    """Case "resource share affected by borrowing limit": the cq sees 10 lendable, its cohort
    50, so the same 10 borrowed are 1000 and 200."""
    state = _drs_state(
        {GPU_RES: 10000},
        [cq("cq", {"default": {GPU_RES: 0}}, cohort="child")],
        [
            cohort("child", "root", {"default": {GPU_RES: quota(0, borrow=10000)}}),
            cohort("root", flavors={"default": {GPU_RES: 50000}}),
        ],
    )
    assert drs(state, ("cq", "cq")).share == 1000
    assert drs(state, ("cohort", "child")).share == 200


def test_shares_reports_every_queue_and_cohort():
    snap = snapshot(
        [
            cq("a", {"default": {"cpu": 2000}}, cohort="c"),
            cq("b", {"default": {"cpu": 8000}}, cohort="c"),
        ],
        [cpu_wl("a1", "a", 4)],
    )
    result = shares(snap)
    assert result.cluster_queues == {"a": 200.0, "b": 0.0}  # (4-2) of the cohort's 10
    assert result.cohorts == {"c": 0.0}


# -- fair sharing preemption (preemption_fair_test.go TestFairPreemptions) ----------------------


def _base_cqs(weight_a: float = 1.0, weight_b: float = 1.0) -> list[ClusterQueue]:
    """The test's baseCQs: a, b, c with 3 cpu each and `preemptible` with none."""
    queues = [
        cq(name, {"default": {"cpu": 3 * CPU}}, cohort="all", within=LOWER, reclaim=ANY)
        for name in ("a", "b", "c")
    ]
    queues[0] = replace(queues[0], fair_weight=weight_a)
    queues[1] = replace(queues[1], fair_weight=weight_b)
    return [*queues, cq("preemptible", {"default": {"cpu": 0}}, cohort="all")]


def _units(queue: str, n: int, start: int = 1, priority: int = 0) -> list[Workload]:
    return [cpu_wl(f"{queue}{i}", queue, 1, priority=priority) for i in range(start, start + n)]


def _fair_targets(
    queues: list[ClusterQueue],
    running: list[Workload],
    incoming_cpu: float,
    target_cq: str,
    strategies: tuple[str, ...] | None = None,
    cohorts: Iterable[Cohort] = (),
) -> dict[str, str]:
    config = FAIR if strategies is None else replace(FAIR, fair_sharing_strategies=strategies)
    state = ClusterState(fair(snapshot(queues, running, cohorts=cohorts), config))
    before = {k: dict(v) for k, v in state.usage.items()}
    request = {("default", "cpu"): int(incoming_cpu * CPU)}
    incoming = wl("incoming", target_cq, requests={"cpu": int(incoming_cpu * CPU)})
    victims = find_targets(state, incoming, state.cq(target_cq), request, set(request))
    assert state.usage == before  # the search leaves the state as it found it
    return {v.workload: v.reason.value for v in victims}


def test_reclaims_nominal_quota_from_the_queue_using_the_most():
    """Case "reclaim nominal from user using the most"."""
    running = _units("a", 3) + _units("b", 5) + _units("c", 1)
    assert _fair_targets(_base_cqs(), running, 1, "c") == {"b1": "InCohortReclamation"}


def test_reclaims_from_a_smaller_user_when_the_biggest_one_is_not_enough():
    """Case "can reclaim from queue using less, if taking the latest workload from user using
    the most isn't enough"."""
    running = [cpu_wl("a1", "a", 3), cpu_wl("a2", "a", 1), cpu_wl("b1", "b", 2)]
    running.append(cpu_wl("b2", "b", 3))
    assert _fair_targets(_base_cqs(), running, 3, "c") == {"a1": "InCohortReclamation"}


def test_borrowing_preemptor_takes_from_the_highest_share_with_fair_sharing_reason():
    """Case "reclaim borrowable quota from user using the most"."""
    running = _units("a", 3) + _units("b", 5) + _units("c", 1)
    assert _fair_targets(_base_cqs(), running, 1, "a") == {"b1": "InCohortFairSharing"}


def test_no_preemption_when_everyone_is_under_nominal():
    """Case "can't preempt when everyone under nominal"."""
    running = _units("a", 3) + _units("b", 3) + _units("c", 3)
    assert _fair_targets(_base_cqs(), running, 1, "c") == {}


def test_no_preemption_that_would_switch_the_imbalance():
    """Case "can't preempt when it would switch the imbalance"."""
    running = _units("a", 3) + _units("b", 5)
    assert _fair_targets(_base_cqs(), running, 2, "a") == {}


def test_combines_own_lower_priority_and_the_highest_user():
    """Case "can preempt a combination of same CQ and highest user"."""
    running = [cpu_wl("a_low", "a", 1, priority=-1), *_units("a", 2, start=2)]
    running += _units("b", 6)
    assert _fair_targets(_base_cqs(), running, 2, "a") == {
        "a_low": "InClusterQueue",
        "b1": "InCohortFairSharing",
    }


def test_prefers_the_victim_that_does_not_leave_the_target_with_the_biggest_share():
    """Case "prefer to preempt workloads that don't make the target CQ have the biggest share":
    rule S2-a allows b2 before S2-b would take b1."""
    running = [cpu_wl("b1", "b", 2), cpu_wl("b2", "b", 1), cpu_wl("b3", "b", 2)]
    running.append(cpu_wl("c1", "c", 1))
    assert _fair_targets(_base_cqs(), running, 3.5, "a") == {"b2": "InCohortFairSharing"}


def test_cannot_push_a_queue_under_nominal():
    """Case "cannot preempt if it would make the candidate CQ go under nominal after
    preempting one element"."""
    running = [cpu_wl("b1", "b", 3), cpu_wl("b2", "b", 3), cpu_wl("c1", "c", 3)]
    assert _fair_targets(_base_cqs(), running, 4, "a") == {}


@pytest.mark.parametrize(
    ("strategies", "victim"),
    [(("LessThanInitialShare",), "b_low"), (("LessThanOrEqualToFinalShare",), "b_high")],
)
def test_each_strategy_alone(strategies, victim):
    """Cases "preempt lower priority first, even if big" (S2-b only) and "preempt workload
    that doesn't transfer the imbalance, even if high priority" (S2-a only)."""
    running = [cpu_wl("a1", "a", 3), cpu_wl("b_low", "b", 5, priority=0)]
    running.append(cpu_wl("b_high", "b", 1, priority=1))
    assert _fair_targets(_base_cqs(), running, 1, "a", strategies) == {
        victim: "InCohortFairSharing"
    }


def test_higher_weight_preempts_more():
    """Case "CQ with higher weight can preempt more"."""
    running = _units("a", 3) + _units("b", 6)
    assert _fair_targets(_base_cqs(weight_a=2), running, 2, "a") == {
        "b1": "InCohortFairSharing",
        "b2": "InCohortFairSharing",
    }


def test_anything_a_zero_weight_queue_borrows_can_be_preempted():
    """Case "can preempt anything borrowing from CQ with 0 weight"."""
    running = _units("a", 3) + _units("b", 6)
    assert _fair_targets(_base_cqs(weight_b=0), running, 3, "a") == {
        "b1": "InCohortFairSharing",
        "b2": "InCohortFairSharing",
        "b3": "InCohortFairSharing",
    }


# -- hierarchical fair sharing preemption (TestFairPreemptions, cohort trees) -------------------


def _cpu_cq(name: str, cpus: float, parent: str, weight: float = 1.0, **kwargs) -> ClusterQueue:
    queue = cq(name, {"default": {"cpu": int(cpus * CPU)}}, cohort=parent, **kwargs)
    return replace(queue, fair_weight=weight)


def _cpu_cohort(
    name: str, parent: str | None = None, cpus: float | None = None, weight: float = 1.0
) -> Cohort:
    flavors = None if cpus is None else {"default": {"cpu": int(cpus * CPU)}}
    return replace(cohort(name, parent, flavors), fair_weight=weight)


def test_hierarchical_preemption_reaches_every_subtree():
    """Case "hierarchical preemption": ROOT(5) holds LEFT(5; a weight 2, b) with LEFT weight 2,
    c, and RIGHT(5; d, e weight 0.99), every queue 1 cpu; b, c, d, e run five 1-cpu
    workloads each (priority = index). a's 5-cpu workload takes two from b, two from c and one
    from e, each by fair sharing."""
    queues = [
        _cpu_cq("a", 1, "LEFT", weight=2, reclaim=ANY),
        _cpu_cq("b", 1, "LEFT"),
        _cpu_cq("c", 1, "ROOT"),
        _cpu_cq("d", 1, "RIGHT"),
        _cpu_cq("e", 1, "RIGHT", weight=0.99),
    ]
    cohorts = [
        _cpu_cohort("ROOT", cpus=5),
        _cpu_cohort("LEFT", "ROOT", cpus=5, weight=2),
        _cpu_cohort("RIGHT", "ROOT", cpus=5),
    ]
    running = [cpu_wl(f"{queue}{i}", queue, 1, priority=i) for queue in "bcde" for i in range(1, 6)]
    assert _fair_targets(queues, running, 5, "a", cohorts=cohorts) == dict.fromkeys(
        ["b1", "b2", "c1", "c2", "e1"], "InCohortFairSharing"
    )


def test_borrowing_queue_in_a_cohort_within_its_quota_is_protected():
    """Case "borrowing cq in non-borrowing cohort is protected": b borrows RIGHT's 1 cpu but
    RIGHT does not borrow from ROOT, so a (weight 10) must preempt its own workloads."""
    queues = [
        _cpu_cq("a", 5, "ROOT", weight=10, reclaim=ANY, within=LOWER),
        replace(cq("b", cohort="RIGHT"), fair_weight=0.1),
    ]
    cohorts = [_cpu_cohort("ROOT"), _cpu_cohort("RIGHT", "ROOT", cpus=1, weight=0.1)]
    running = [cpu_wl(f"a{i}", "a", 1, priority=-1) for i in (1, 2, 3)]
    running.append(cpu_wl("b1", "b", 1, priority=-1))
    assert _fair_targets(queues, running, 5, "a", cohorts=cohorts) == dict.fromkeys(
        ["a1", "a2", "a3"], "InClusterQueue"
    )


def test_forced_to_preempt_within_the_queue_when_the_borrower_is_too_important():
    """Case "forced to preempt within clusterqueue because borrowing workload too important":
    RIGHT borrows 1 of ROOT through b1 (4 cpu, priority 100), which a's lower-priority policy
    cannot touch."""
    queues = [
        _cpu_cq("a", 5, "ROOT", weight=10, reclaim=LOWER, within=LOWER),
        replace(cq("b", cohort="RIGHT"), fair_weight=0.1),
    ]
    cohorts = [_cpu_cohort("ROOT"), _cpu_cohort("RIGHT", "ROOT", cpus=3, weight=0.1)]
    running = [cpu_wl(f"a{i}", "a", 1, priority=-1) for i in (1, 2, 3)]
    running.append(cpu_wl("b1", "b", 4, priority=100))
    assert _fair_targets(queues, running, 4, "a", cohorts=cohorts) == dict.fromkeys(
        ["a1", "a2", "a3"], "InClusterQueue"
    )


def test_deep_preemption_compares_the_children_of_the_common_cohort():
    """Case "deep preemption": a (in AAA) and b (in BBB) have no quota, CCCC has 1 cpu; the
    shares compared are those of A (weight 1.01) and B (weight 0.99), so a takes b1."""
    queues = [cq("a", {"default": {"cpu": 0}}, cohort="AAA", reclaim=ANY)]
    queues.append(cq("b", {"default": {"cpu": 0}}, cohort="BBB"))
    cohorts = [
        _cpu_cohort("ROOT"),
        _cpu_cohort("A", "ROOT", weight=1.01),
        _cpu_cohort("AA", "A"),
        _cpu_cohort("AAA", "AA"),
        _cpu_cohort("B", "ROOT", weight=0.99),
        _cpu_cohort("BB", "B"),
        _cpu_cohort("BBB", "BB"),
        _cpu_cohort("C", "ROOT"),
        _cpu_cohort("CC", "C"),
        _cpu_cohort("CCC", "CC"),
        _cpu_cohort("CCCC", "CCC", cpus=1),
    ]
    running = [cpu_wl("b1", "b", 1)]
    assert _fair_targets(queues, running, 1, "a", cohorts=cohorts) == {"b1": "InCohortFairSharing"}


def test_nominal_quota_of_a_zero_weight_cohort_is_protected():
    """Case "can't preempt nominal from Cohort with 0 weight": right-cq and right-cohort (both
    weight 0) use right-cohort's own 1 cpu, which left-cq cannot take."""
    queues = [
        cq("left-cq", {"default": {"cpu": 0}}, cohort="root", reclaim=ANY),
        _cpu_cq("right-cq", 0, "right-cohort", weight=0, reclaim=ANY),
    ]
    cohorts = [_cpu_cohort("right-cohort", "root", cpus=1, weight=0)]
    running = [cpu_wl("right-1", "right-cq", 1)]
    assert _fair_targets(queues, running, 1, "left-cq", cohorts=cohorts) == {}


def test_zero_weight_cohort_reclaims_its_nominal_quota():
    """Case "cohort with zero weight can reclaim nominal quota": a (weight 0) in A (weight 0,
    1 cpu) takes that cpu back from b, which borrows it at ROOT."""
    queues = [_cpu_cq("a", 0, "A", weight=0, reclaim=ANY), _cpu_cq("b", 0, "ROOT")]
    cohorts = [_cpu_cohort("A", "ROOT", cpus=1, weight=0)]
    running = [cpu_wl("b1", "b", 1)]
    assert _fair_targets(queues, running, 1, "a", cohorts=cohorts) == {"b1": "InCohortFairSharing"}


def test_candidates_skipped_by_the_first_strategy_stay_for_the_second():
    """Case "candidates skipped by the first strategy are still available to the second
    strategy": ROOT holds A (weight 0, 1 cpu; p and y with 2 cpu each) and x (1 cpu). Against
    x the preemptor's side is A, whose share is infinite; once y1 goes A stops borrowing and
    rule S2-b takes x1."""
    queues = [
        _cpu_cq("p", 2, "A", reclaim=ANY),
        _cpu_cq("y", 2, "A"),
        _cpu_cq("x", 1, "ROOT"),
    ]
    cohorts = [_cpu_cohort("A", "ROOT", cpus=1, weight=0)]
    running = [cpu_wl("p1", "p", 2), cpu_wl("y1", "y", 2), cpu_wl("y2", "y", 2)]
    running += [cpu_wl("x1", "x", 1), cpu_wl("x2", "x", 1)]
    assert _fair_targets(queues, running, 1, "p", cohorts=cohorts) == dict.fromkeys(
        ["y1", "x1"], "InCohortFairSharing"
    )


# -- the fair sharing iterator (scheduler_fs_test.go TestScheduleForFairSharing) ----------------


def _eng_queues() -> list[ClusterQueue]:
    """eng-alpha, eng-beta and eng-shared of the test, on-demand only."""
    return [
        cq("eng-alpha", {"on-demand": {"cpu": quota(50 * CPU, borrow=50 * CPU)}}, cohort="eng"),
        cq(
            "eng-beta",
            {"on-demand": {"cpu": quota(50 * CPU, borrow=10 * CPU)}},
            cohort="eng",
            within=LOWER,
            reclaim=ANY,
        ),
        cq("eng-shared", {"on-demand": {"cpu": quota(10 * CPU, borrow=0)}}, cohort="eng"),
    ]


def _eng_workloads() -> list[Workload]:
    return [
        admitted("all_nominal", "eng-alpha", flavor="on-demand", requests={"cpu": CPU}, count=50),
        admitted("borrowing", "eng-beta", flavor="on-demand", requests={"cpu": CPU}, count=55),
        wl("older_new", "eng-beta", requests={"cpu": CPU}, count=1, created=-60),
        wl("new", "eng-alpha", requests={"cpu": CPU}, count=5, created=0),
    ]


def test_fair_sharing_admits_the_workload_with_the_lowest_share_after_admission_first():
    """Case "with fair sharing: schedule workload with lowest share first": `new` (eng-alpha
    would borrow 5) goes before the older `older_new` (eng-beta would borrow 6), which then no
    longer fits."""
    result = Result(schedule(fair(snapshot(_eng_queues(), _eng_workloads()))))
    assert result.admitted == ["new"]
    assert "older_new" in result.pending


def test_without_fair_sharing_the_older_workload_goes_first():
    """The same snapshot with fair sharing off: both borrow, so the older one wins."""
    result = Result(schedule(snapshot(_eng_queues(), _eng_workloads())))
    assert result.admitted == ["older_new"]


def test_zero_weight_queue_goes_last_while_it_borrows():
    """Case "fair sharing two queues with weight 0 schedules workload which borrows less":
    two zero-weight queues compare by unweighted share."""
    queues = [
        replace(cq(name, {"default": {"cpu": 2 * CPU}}, cohort="c"), fair_weight=0)
        for name in ("a", "b")
    ]
    queues.append(cq("lender", {"default": {"cpu": 4 * CPU}}, cohort="c"))
    pending = [
        wl("a_big", "a", requests={"cpu": 6 * CPU}, created=0),
        wl("b_small", "b", requests={"cpu": 3 * CPU}, created=1),
    ]
    result = Result(schedule(fair(snapshot(queues, pending))))
    assert result.admitted == ["b_small"]


def test_tournament_runs_down_the_cohort_tree():
    """Case "hierarchical fair sharing schedule workload which wins tournament": the child
    cohort that borrows less wins at the root, whatever its queues' own shares."""
    queues = [
        cq("left-q", {"default": {"cpu": 0}}, cohort="left"),
        cq("right-q", {"default": {"cpu": 0}}, cohort="right"),
    ]
    cohorts = [
        cohort("root", flavors={"default": {"cpu": 10 * CPU}}),
        cohort("left", "root"),
        cohort("right", "root"),
    ]
    running = [cpu_wl("left-running", "left-q", 4)]
    pending = [
        wl("left-new", "left-q", requests={"cpu": 3 * CPU}, created=0),
        wl("right-new", "right-q", requests={"cpu": 4 * CPU}, created=1),
    ]
    result = Result(schedule(fair(snapshot(queues, running + pending, cohorts=cohorts))))
    # right (4 borrowed) beats left (7 borrowed); then left-new no longer fits (4+4+3 > 10).
    assert result.admitted == ["right-new"]


# -- admission fair sharing (scheduler_afs_test.go TestScheduleForAFS) --------------------------

AFS = AdmissionFairSharing(usage_half_life_time=600, usage_sampling_interval=300)


def _afs_snapshot(usage: dict[str, float], config: AdmissionFairSharing | None = AFS) -> Snapshot:
    queue = replace(cq("cq", {"default": {"cpu": 2 * CPU}}), admission_fair_sharing=True)
    pending = [
        replace(wl("a1", "cq", requests={"cpu": CPU}, created=0), local_queue="ns/lq-a"),
        replace(wl("a2", "cq", requests={"cpu": CPU}, created=1), local_queue="ns/lq-a"),
        replace(wl("b1", "cq", requests={"cpu": CPU}, created=2), local_queue="ns/lq-b"),
    ]
    return replace(
        snapshot([queue], pending),
        config=SchedulingConfig(admission_fair_sharing=config),
        local_queue_usage=usage,
    )


def test_admits_from_the_less_used_local_queue_first():
    """Case "admits workload from less active localqueue": lq-a used more, so b1 goes first
    despite being the newest."""
    result = Result(schedule(_afs_snapshot({"ns/lq-a": 10.0, "ns/lq-b": 1.0})))
    assert result.admitted[0] == "b1"


def test_admission_penalty_alternates_between_local_queues():
    """Case "admits one workload from each localqueue when quota is limited": with equal usage,
    a1 goes first by age; its entry penalty makes lq-b the less used one for the next."""
    result = Result(schedule(_afs_snapshot({})))
    assert result.admitted == ["a1", "b1"]


def test_without_admission_fair_sharing_usage_is_ignored():
    """Case "without AFS: classic admission decision ignores queue usage"."""
    result = Result(schedule(_afs_snapshot({"ns/lq-a": 10.0}, config=None)))
    assert result.admitted == ["a1", "a2"]


def test_usage_and_penalty_arithmetic():
    """admission_fair_sharing_test.go: CalculateUsage weights resources and divides by the
    LocalQueue weight (a non-positive weight sorts last); the entry penalty is the request
    times alpha(samplingInterval, halfLife)."""
    config = AdmissionFairSharing(600, 300, {"cpu": 2.0})
    assert local_queue_usage({"cpu": 3.0, "memory": 4.0}, 2.0, config) == 5.0
    assert math.isinf(local_queue_usage({"cpu": 1.0}, 0, config))
    assert alpha(300, 0) == 0
    rate = alpha(300, 600)
    assert rate == pytest.approx(1 - 0.5**0.5)
    workload = wl("w", "cq", requests={"cpu": 2 * CPU}, count=2)
    assert entry_penalty(workload, 1.0, config) == pytest.approx(2.0 * 4 * rate)


@pytest.mark.parametrize("fair_sharing", [False, True])
@pytest.mark.parametrize(("config", "victim"), [(AFS, "busy"), (None, "idle")])
def test_preemption_takes_from_the_most_used_local_queue_first(fair_sharing, config, victim):
    """preemption_test.go TestCandidatesOrdering, case "workloads with higher LQ usage first"
    (`preemption/common/ordering.go` CandidatesOrdering, `resourceUsagePreemptionEnabled`):
    in a UsageBasedAdmissionFairSharing ClusterQueue, the candidate of the LocalQueue that
    used more goes first although its priority is higher; without admission fair sharing the
    lower priority goes first. Classical and fair sharing preemption order alike."""
    queue = replace(
        cq("cq", {"default": {"cpu": 2 * CPU}}, within=LOWER), admission_fair_sharing=True
    )
    running = [
        replace(cpu_wl("busy", "cq", 1, priority=10), local_queue="ns/busy"),
        replace(cpu_wl("idle", "cq", 1, priority=1), local_queue="ns/idle"),
    ]
    snap = replace(
        snapshot([queue], running),
        config=SchedulingConfig(fair_sharing=fair_sharing, admission_fair_sharing=config),
        local_queue_usage={"ns/busy": 0.5, "ns/idle": 0.1},
    )
    state = ClusterState(snap)
    request = {("default", "cpu"): CPU}
    incoming = replace(wl("new", "cq", requests={"cpu": CPU}, priority=100), local_queue="ns/x")
    victims = find_targets(state, incoming, state.cq("cq"), request, set(request))
    assert [v.workload for v in victims] == [victim]
