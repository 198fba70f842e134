"""Quota arithmetic (kueue-semantics §5): nominal, cohorts, borrowing/lending limits, hierarchy.

The expected numbers are computed by hand in the comments from §5's definitions:
  localQuota = max(0, SubtreeQuota - lendingLimit) when a lending limit is set, else 0
  cohort SubtreeQuota = own nominal + Σ children (SubtreeQuota - localQuota)
  Available(root) = SubtreeQuota - Usage
  Available(node) = LocalAvailable + min(Available(parent), stored - usedInParent + borrowingLimit)
  PotentialAvailable(node) = min(localQuota + PotentialAvailable(parent), SubtreeQuota + limit)

Tests -> kueue-semantics §16 checklist items ("§5" where no item is about it):
  §5  test_flat_cohort_pools_unused_nominal_quota
  §5  test_queue_without_cohort_only_has_its_nominal_quota
  §5  test_borrowing_limit_caps_what_a_queue_can_take_from_the_cohort
  §5  test_lending_limit_keeps_part_of_the_nominal_quota_private
  §5  test_hierarchical_cohort_subtree_quota_and_availability
  1   test_borrowing_level_is_the_height_of_the_lowest_subtree_that_covers_the_request
  3   test_request_above_potential_available_exceeds_max_quota (NoFit: never preempts)
  §5  test_request_within_potential_but_above_available_waits_for_quota
  §5  test_lending_limit_means_other_queues_never_borrow_the_private_part
  §5  test_cohort_own_quota_is_lent_to_its_members
  1   test_admission_reports_whether_the_workload_borrows
  2   test_two_workloads_can_borrow_in_the_same_cycle_if_the_cohort_has_room
  2   test_cannot_borrow_what_an_earlier_entry_of_the_cycle_took
  §5  test_borrowing_limit_applies_to_a_cohort_too
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler import ClusterQueue, Cohort
from scheduler.quota import QuotaTree
from tests.unit.scheduler.builders import (
    ANY,
    GPU,
    LOWER,
    admitted,
    cohort,
    cq,
    gpu_cq,
    quota,
    run,
    wl,
)

FR = ("default", "gpu")


def tree(queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort] = ()) -> QuotaTree:
    return QuotaTree({q.name: q for q in queues}, {c.name: c for c in cohorts})


def use(t: QuotaTree, queue: str, gpus: int) -> None:
    t.add(("cq", queue), {FR: gpus * GPU})


def available(t: QuotaTree, queue: str) -> int:
    return t.available(("cq", queue), FR) // GPU


def potential(t: QuotaTree, queue: str) -> int:
    return t.potential_available(("cq", queue), FR) // GPU


def test_flat_cohort_pools_unused_nominal_quota():
    # team = a(4) + b(6): SubtreeQuota 10.
    t = tree([gpu_cq("a", 4, cohort="team"), gpu_cq("b", 6, cohort="team")])
    assert (available(t, "a"), potential(t, "a")) == (10, 10)
    use(t, "a", 3)
    use(t, "b", 5)
    # Cohort usage 8: both see 10 - 8 = 2, including the 1 GPU of a's nominal that a is not
    # using; nothing is reserved for a unless it sets a lending limit.
    assert (available(t, "a"), available(t, "b")) == (2, 2)
    assert t.is_borrowing(("cq", "a"), FR) is False


def test_queue_without_cohort_only_has_its_nominal_quota():
    t = tree([gpu_cq("solo", 4)])
    use(t, "solo", 3)
    assert (available(t, "solo"), potential(t, "solo")) == (1, 4)


def test_borrowing_limit_caps_what_a_queue_can_take_from_the_cohort():
    # a: nominal 4, borrowingLimit 2; b: nominal 6. team SubtreeQuota 10.
    queues = [
        cq("a", {"default": {"gpu": quota(4 * GPU, borrow=2 * GPU)}}, cohort="team"),
        gpu_cq("b", 6, cohort="team"),
    ]
    t = tree(queues)
    # Potential(a) = min(0 + 10, 4 + 2) = 6.
    assert potential(t, "a") == 6
    use(t, "a", 5)
    # parent available 10 - 5 = 5; limit: stored 4 - used 5 + 2 = 1 -> min(5, 1) = 1.
    assert available(t, "a") == 1
    use(t, "b", 4)
    # parent available 10 - 9 = 1; limit 1 -> 1. b: 10 - 9 = 1.
    assert (available(t, "a"), available(t, "b")) == (1, 1)


def test_lending_limit_keeps_part_of_the_nominal_quota_private():
    # a: nominal 4, lendingLimit 1 -> localQuota 3, lends 1. b: nominal 6.
    # team SubtreeQuota = (4 - 3) + 6 = 7.
    queues = [
        cq("a", {"default": {"gpu": quota(4 * GPU, lend=1 * GPU)}}, cohort="team"),
        gpu_cq("b", 6, cohort="team"),
    ]
    t = tree(queues)
    assert t.subtree_quota(("cohort", "team"), FR) == 7 * GPU
    # Potential(a) = 3 + 7 = 10; Potential(b) = 0 + 7 = 7.
    assert (potential(t, "a"), potential(t, "b")) == (10, 7)
    use(t, "a", 2)  # within a's private 3: nothing reaches the cohort
    assert t.usage(("cohort", "team"), FR) == 0
    # Available(a) = LocalAvailable 1 + cohort 7 = 8; Available(b) = 7.
    assert (available(t, "a"), available(t, "b")) == (8, 7)
    use(t, "b", 7)
    # The cohort is exhausted, a still has 1 private GPU.
    assert (available(t, "a"), available(t, "b")) == (1, 0)
    use(t, "a", 2)  # a now uses 4: 1 past its private 3 is charged to the cohort
    assert t.usage(("cohort", "team"), FR) == 8 * GPU


def test_hierarchical_cohort_subtree_quota_and_availability():
    # org (own 2) ── ml ── {a: 4, b: 2}
    #             └─ web ── {c: 4, lendingLimit 2}
    # SubtreeQuota: ml = 6; c's localQuota = 2 so web = 4 - 2 = 2; org = 2 + 6 + 2 = 10.
    cohorts = [
        cohort("org", flavors={"default": {"gpu": 2 * GPU}}),
        cohort("ml", "org"),
        cohort("web", "org"),
    ]
    queues = [
        gpu_cq("a", 4, cohort="ml"),
        gpu_cq("b", 2, cohort="ml"),
        cq("c", {"default": {"gpu": quota(4 * GPU, lend=2 * GPU)}}, cohort="web"),
    ]
    t = tree(queues, cohorts)
    assert [t.subtree_quota(("cohort", n), FR) // GPU for n in ("ml", "web", "org")] == [6, 2, 10]
    # Potential(a) = 0 + 0 + 10 = 10 (c's private 2 is out of reach); Potential(c) = 2 + 10 = 12.
    assert (potential(t, "a"), potential(t, "c")) == (10, 12)
    use(t, "a", 5)  # borrows 1 inside ml
    use(t, "c", 3)  # 2 private + 1 charged to web
    # Usage: ml 5, web 3 - 2 = 1, org 5 + 1 = 6.
    assert [t.usage(("cohort", n), FR) // GPU for n in ("ml", "web", "org")] == [5, 1, 6]
    # Available(b) = Available(ml) = Available(org) = 10 - 6 = 4.
    # Available(c) = LocalAvailable max(0, 2 - 3) = 0 + 4 = 4.
    assert (available(t, "a"), available(t, "b"), available(t, "c")) == (4, 4, 4)


def test_borrowing_level_is_the_height_of_the_lowest_subtree_that_covers_the_request():
    # Same tree as above, a uses 5, c uses 3.
    cohorts = [
        cohort("org", flavors={"default": {"gpu": 2 * GPU}}),
        cohort("ml", "org"),
        cohort("web", "org"),
    ]
    queues = [
        gpu_cq("a", 4, cohort="ml"),
        gpu_cq("b", 2, cohort="ml"),
        cq("c", {"default": {"gpu": quota(4 * GPU, lend=2 * GPU)}}, cohort="web"),
    ]
    t = tree(queues, cohorts)
    use(t, "a", 5)
    use(t, "c", 3)
    # b asks 1: 0 + 1 <= 2, own quota: level 0.
    assert t.borrowing_level(("cq", "b"), FR, 1 * GPU) == 0
    # a asks 1 more: a borrows; ml 5 + 1 <= 6 covers it: level = height(ml) = 1.
    assert t.borrowing_level(("cq", "a"), FR, 1 * GPU) == 1
    # a asks 2 more: ml 5 + 2 > 6; org 6 + 2 <= 10 covers it: level = height(org) = 2.
    assert t.borrowing_level(("cq", "a"), FR, 2 * GPU) == 2


def test_request_above_potential_available_exceeds_max_quota():
    queues = [
        cq(
            "a",
            {"default": {"gpu": quota(4 * GPU, borrow=2 * GPU)}},
            cohort="team",
            within=LOWER,
            reclaim=ANY,
        ),
        gpu_cq("b", 6, cohort="team"),
    ]
    result = run(queues, [admitted("low", "a", 1, priority=-5), wl("big", "a", 7, priority=9)])
    assert result.admitted == []
    assert result.victims == {}
    assert result.reason("big") == "ExceedsMaxQuota"


def test_request_within_potential_but_above_available_waits_for_quota():
    queues = [gpu_cq("a", 2, cohort="team"), gpu_cq("b", 6, cohort="team")]
    result = run(queues, [admitted("b-full", "b", 6), wl("w", "a", 4)])
    assert result.admitted == []
    assert result.reason("w") == "WaitingForQuota"
    assert result.pending["w"].parked is True


def test_lending_limit_means_other_queues_never_borrow_the_private_part():
    queues = [
        cq("a", {"default": {"gpu": quota(4 * GPU, lend=1 * GPU)}}, cohort="team"),
        gpu_cq("b", 2, cohort="team"),
    ]
    # b can reach 2 + 1 = 3 GPUs at most.
    assert run(queues, [wl("b3", "b", 3)]).admitted == ["b3"]
    assert run(queues, [wl("b4", "b", 4)]).reason("b4") == "ExceedsMaxQuota"


def test_cohort_own_quota_is_lent_to_its_members():
    cohorts = [cohort("team", flavors={"default": {"gpu": 3 * GPU}})]
    result = run([gpu_cq("a", 0, cohort="team")], [wl("w", "a", 3)], cohorts=cohorts)
    assert result.admitted == ["w"]
    assert result.borrowing("w") is True


def test_admission_reports_whether_the_workload_borrows():
    queues = [gpu_cq("a", 2, cohort="team"), gpu_cq("b", 2, cohort="team")]
    result = run(queues, [wl("own", "a", 1), wl("borrows", "b", 3)])
    assert sorted(result.admitted) == ["borrows", "own"]
    assert result.borrowing("own") is False
    assert result.borrowing("borrows") is True


def test_two_workloads_can_borrow_in_the_same_cycle_if_the_cohort_has_room():
    # a: 2, b: 2, c: 4 (idle). a1 and b1 each borrow 1; the cohort has 8.
    queues = [
        gpu_cq("a", 2, cohort="team"),
        gpu_cq("b", 2, cohort="team"),
        gpu_cq("c", 4, cohort="team"),
    ]
    result = run(queues, [wl("a1", "a", 3), wl("b1", "b", 3)])
    assert sorted(result.admitted) == ["a1", "b1"]
    assert result.decisions.cycles >= 1


def test_cannot_borrow_what_an_earlier_entry_of_the_cycle_took():
    # a: 2, b: 2. a1 and b1 each ask 3 (borrow 1); only one can have the cohort's 4.
    queues = [gpu_cq("a", 2, cohort="team"), gpu_cq("b", 2, cohort="team")]
    result = run(queues, [wl("a1", "a", 3, priority=1), wl("b1", "b", 3)])
    assert result.admitted == ["a1"]
    assert "b1" in result.pending


def test_borrowing_limit_applies_to_a_cohort_too():
    # org ── team (borrowingLimit 1 on org's pool) ── {a: 2}; org owns 4 more GPUs.
    cohorts = [
        cohort("org", flavors={"default": {"gpu": 4 * GPU}}),
        cohort("team", "org", flavors={"default": {"gpu": quota(0, borrow=1 * GPU)}}),
    ]
    queues = [gpu_cq("a", 2, cohort="team")]
    t = tree(queues, cohorts)
    # Potential(team) = min(0 + 6, 2 + 1) = 3; Potential(a) = 0 + 3 = 3.
    assert potential(t, "a") == 3
    assert run(queues, [wl("w", "a", 4)], cohorts=cohorts).reason("w") == "ExceedsMaxQuota"
    assert run(queues, [wl("w", "a", 3)], cohorts=cohorts).admitted == ["w"]
