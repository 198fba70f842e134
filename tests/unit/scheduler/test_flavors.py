"""Flavor assignment (kueue-semantics §4): fungibility, taints and selectors, resource groups.

Tests -> kueue-semantics §16 checklist items ("§4" where no item is about it):
  6   test_default_fungibility_takes_the_first_flavor_that_fits_even_when_borrowing
  6   test_try_next_flavor_when_can_borrow_prefers_a_later_flavor_within_nominal
  6   test_try_next_flavor_when_can_borrow_falls_back_to_the_earliest_borrowing_flavor
  6   test_default_fungibility_passes_over_a_flavor_that_needs_preemption
  6   test_may_stop_search_when_can_preempt_preempts_in_the_first_flavor
  6   test_when_no_flavor_fits_the_earliest_flavor_needing_preemption_is_chosen
  6   test_reclaim_in_a_later_flavor_beats_in_cluster_queue_preemption_in_the_first
  6   test_flavor_without_preemption_candidates_ranks_below_one_with_candidates
  6   test_try_next_flavor_when_can_borrow_also_passes_over_preemption_that_would_borrow
  §4  test_untolerated_flavor_taint_skips_the_flavor
  §4  test_pod_toleration_lets_a_workload_use_a_tainted_flavor
  §4  test_flavor_tolerations_count_against_its_own_taints
  §4  test_prefer_no_schedule_taint_does_not_exclude_a_flavor
  §4  test_toleration_with_the_wrong_value_does_not_tolerate_the_taint
  §4  test_node_selector_picks_the_flavor_with_matching_labels
  §4  test_node_selector_keys_the_flavor_does_not_define_are_ignored
  §4  test_required_affinity_picks_a_flavor_matching_any_term
  §4  test_affinity_term_naming_only_unknown_keys_matches_every_flavor
  §4  test_no_matching_flavor_when_every_flavor_is_excluded
  §4  test_missing_resource_flavor_object_excludes_the_flavor
  §4  test_pending_reason_is_the_least_severe_among_a_groups_flavors
  §4  test_pending_reason_waiting_for_quota_is_less_severe_than_exceeding_it
  §4  test_resources_of_one_group_get_the_same_flavor
  §4  test_resource_groups_are_assigned_independently
  §4  test_resource_the_queue_does_not_cover_is_no_matching_flavor
  §4  test_zero_request_for_an_uncovered_resource_is_ignored
  §4  test_pods_are_counted_when_the_queue_covers_them
  §4  test_later_pod_sets_see_the_quota_earlier_pod_sets_took
"""

from __future__ import annotations

from dataclasses import replace

from scheduler import ResourceFlavor, Taint, Toleration, schedule
from tests.unit.scheduler.builders import (
    CPU,
    GPU,
    LOWER,
    MAY_STOP,
    TRY_NEXT,
    Result,
    admitted,
    cq,
    flavor,
    pod_set,
    req,
    run,
    snapshot,
    wl,
)

TWO_FLAVORS = {"f1": {"gpu": 2 * GPU}, "f2": {"gpu": 4 * GPU}}


# -- fungibility (checklist 6) ----------------------------------------------------------------


def test_default_fungibility_takes_the_first_flavor_that_fits_even_when_borrowing():
    queues = [cq("a", TWO_FLAVORS, cohort="team"), cq("b", {"f1": {"gpu": 4 * GPU}}, cohort="team")]
    result = run(queues, [wl("w", "a", 3)])
    assert result.flavor("w") == "f1"
    assert result.borrowing("w") is True


def test_try_next_flavor_when_can_borrow_prefers_a_later_flavor_within_nominal():
    queues = [
        cq("a", TWO_FLAVORS, cohort="team", when_can_borrow=TRY_NEXT),
        cq("b", {"f1": {"gpu": 4 * GPU}}, cohort="team"),
    ]
    result = run(queues, [wl("w", "a", 3)])
    assert result.flavor("w") == "f2"
    assert result.borrowing("w") is False


def test_try_next_flavor_when_can_borrow_falls_back_to_the_earliest_borrowing_flavor():
    # Both flavors need borrowing (same level): the earlier one is kept.
    spec = {"f1": {"gpu": 1 * GPU}, "f2": {"gpu": 1 * GPU}}
    queues = [
        cq("a", spec, cohort="team", when_can_borrow=TRY_NEXT),
        cq("b", spec, cohort="team"),
    ]
    result = run(queues, [wl("w", "a", 2)])
    assert result.flavor("w") == "f1"
    assert result.borrowing("w") is True


def test_default_fungibility_passes_over_a_flavor_that_needs_preemption():
    queues = [cq("a", {"f1": {"gpu": 2 * GPU}, "f2": {"gpu": 2 * GPU}}, within=LOWER)]
    result = run(queues, [admitted("low", "a", 2, flavor="f1"), wl("p", "a", 2, priority=10)])
    assert result.flavor("p") == "f2"
    assert result.victims == {}


def test_may_stop_search_when_can_preempt_preempts_in_the_first_flavor():
    queues = [
        cq(
            "a",
            {"f1": {"gpu": 2 * GPU}, "f2": {"gpu": 2 * GPU}},
            within=LOWER,
            when_can_preempt=MAY_STOP,
        )
    ]
    result = run(queues, [admitted("low", "a", 2, flavor="f1"), wl("p", "a", 2, priority=10)])
    assert result.admitted == []
    assert result.preemptors == {"p": {"low"}}
    assert result.reason("p") == "WaitingForPreemptedWorkloads"


def test_when_no_flavor_fits_the_earliest_flavor_needing_preemption_is_chosen():
    queues = [cq("a", {"f1": {"gpu": 2 * GPU}, "f2": {"gpu": 2 * GPU}}, within=LOWER)]
    result = run(
        queues,
        [
            admitted("low1", "a", 2, flavor="f1"),
            admitted("low2", "a", 2, flavor="f2"),
            wl("p", "a", 2, priority=10),
        ],
    )
    assert result.preemptors == {"p": {"low1"}}


def test_reclaim_in_a_later_flavor_beats_in_cluster_queue_preemption_in_the_first():
    # Kueue's "prefer reclamation over cq priority based preemption": on-demand needs a1 (own
    # queue) preempted, spot only needs b1 (borrowing from alpha) reclaimed: spot wins.
    spec = {"on-demand": {"gpu": 10 * GPU}, "spot": {"gpu": 10 * GPU}}
    queues = [
        cq("alpha", spec, cohort="other", within=LOWER, reclaim=LOWER),
        cq(
            "beta",
            {"on-demand": {"gpu": 0}, "spot": {"gpu": 0}},
            cohort="other",
            within=LOWER,
            reclaim=LOWER,
        ),
    ]
    result = run(
        queues,
        [
            admitted("a1", "alpha", 5, flavor="on-demand", priority=50),
            admitted("b1", "beta", 5, flavor="spot", priority=50),
            wl("preemptor", "alpha", 6, priority=100),
        ],
    )
    assert result.preemptors == {"preemptor": {"b1"}}
    assert result.victims["b1"].value == "InCohortReclamation"


def test_flavor_without_preemption_candidates_ranks_below_one_with_candidates():
    queues = [cq("a", {"f1": {"gpu": 2 * GPU}, "f2": {"gpu": 2 * GPU}}, within=LOWER)]
    result = run(
        queues,
        [
            admitted("vip", "a", 2, flavor="f1", priority=100),
            admitted("low", "a", 2, flavor="f2", priority=0),
            wl("p", "a", 2, priority=10),
        ],
    )
    assert result.preemptors == {"p": {"low"}}


def test_try_next_flavor_when_can_borrow_also_passes_over_preemption_that_would_borrow():
    # On f1, a (nominal 2) can only get 3 GPUs by reclaiming b's borrowed f1 quota and then
    # borrowing itself; f2 fits within a's nominal quota. whenCanPreempt=MayStopSearch alone
    # would stop at f1, but the preemption would borrow and whenCanBorrow=TryNextFlavor moves on.
    queues = [
        cq(
            "a",
            {"f1": {"gpu": 2 * GPU}, "f2": {"gpu": 4 * GPU}},
            cohort="team",
            reclaim=LOWER,
            borrow_within=LOWER,
            when_can_preempt=MAY_STOP,
            when_can_borrow=TRY_NEXT,
        ),
        cq("b", {"f1": {"gpu": 0}}, cohort="team"),
        cq("c", {"f1": {"gpu": 2 * GPU}}, cohort="team"),
    ]
    result = run(queues, [admitted("b-low", "b", 4, flavor="f1"), wl("w", "a", 3, priority=10)])
    assert result.victims == {}
    assert result.flavor("w") == "f2"


# -- flavor filters: taints, node selectors, affinity ----------------------------------------

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
TOLERATE_GPU = Toleration("nvidia.com/gpu", "Exists")


def two_flavor_queue() -> list:
    return [cq("a", {"first": {"gpu": 4 * GPU}, "second": {"gpu": 4 * GPU}})]


def test_untolerated_flavor_taint_skips_the_flavor():
    flavors = [flavor("first", taints=[GPU_TAINT]), flavor("second")]
    result = run(two_flavor_queue(), [wl("w", "a", 1)], flavors=flavors)
    assert result.flavor("w") == "second"


def test_pod_toleration_lets_a_workload_use_a_tainted_flavor():
    flavors = [flavor("first", taints=[GPU_TAINT]), flavor("second")]
    result = run(two_flavor_queue(), [wl("w", "a", 1, tolerations=[TOLERATE_GPU])], flavors=flavors)
    assert result.flavor("w") == "first"


def test_flavor_tolerations_count_against_its_own_taints():
    flavors = [flavor("first", taints=[GPU_TAINT], tolerations=[TOLERATE_GPU]), flavor("second")]
    result = run(two_flavor_queue(), [wl("w", "a", 1)], flavors=flavors)
    assert result.flavor("w") == "first"


def test_prefer_no_schedule_taint_does_not_exclude_a_flavor():
    soft = Taint("spot", "true", "PreferNoSchedule")
    result = run(two_flavor_queue(), [wl("w", "a", 1)], flavors=[flavor("first", taints=[soft])])
    assert result.flavor("w") == "first"


def test_toleration_with_the_wrong_value_does_not_tolerate_the_taint():
    flavors = [flavor("first", taints=[GPU_TAINT]), flavor("second")]
    wrong = Toleration("nvidia.com/gpu", "Equal", "absent")
    result = run(two_flavor_queue(), [wl("w", "a", 1, tolerations=[wrong])], flavors=flavors)
    assert result.flavor("w") == "second"


def test_node_selector_picks_the_flavor_with_matching_labels():
    flavors = [flavor("first", {"accel": "a100"}), flavor("second", {"accel": "h100"})]
    result = run(
        two_flavor_queue(), [wl("w", "a", 1, node_selector={"accel": "h100"})], flavors=flavors
    )
    assert result.flavor("w") == "second"


def test_node_selector_keys_the_flavor_does_not_define_are_ignored():
    flavors = [flavor("first", {"accel": "a100"}), flavor("second", {"zone": "b"})]
    result = run(
        two_flavor_queue(), [wl("w", "a", 1, node_selector={"zone": "a"})], flavors=flavors
    )
    assert result.flavor("w") == "first"


def test_required_affinity_picks_a_flavor_matching_any_term():
    flavors = [flavor("first", {"accel": "a100"}), flavor("second", {"accel": "h100"})]
    affinity = [[req("accel", "In", "tpu")], [req("accel", "In", "h100", "b200")]]
    result = run(two_flavor_queue(), [wl("w", "a", 1, affinity=affinity)], flavors=flavors)
    assert result.flavor("w") == "second"


def test_affinity_term_naming_only_unknown_keys_matches_every_flavor():
    flavors = [flavor("first", {"accel": "a100"}), flavor("second", {"accel": "h100"})]
    affinity = [[req("accel", "In", "h100")], [req("pool", "In", "x")]]
    result = run(two_flavor_queue(), [wl("w", "a", 1, affinity=affinity)], flavors=flavors)
    assert result.flavor("w") == "first"


def test_no_matching_flavor_when_every_flavor_is_excluded():
    flavors = [flavor("first", {"accel": "a100"}), flavor("second", {"accel": "h100"})]
    result = run(
        two_flavor_queue(), [wl("w", "a", 1, node_selector={"accel": "tpu"})], flavors=flavors
    )
    assert result.admitted == []
    assert result.reason("w") == "NoMatchingFlavor"
    assert result.pending["w"].parked is True


def test_missing_resource_flavor_object_excludes_the_flavor():
    snap = snapshot(two_flavor_queue(), [wl("w", "a", 1)])
    snap = replace(snap, flavors={"second": ResourceFlavor("second")})
    result = Result(schedule(snap))
    assert result.flavor("w") == "second"


def test_pending_reason_is_the_least_severe_among_a_groups_flavors():
    # first: quota too small for ever (ExceedsMaxQuota); second: tainted (NoMatchingFlavor).
    # Kueue reports the least severe blocker among alternative flavors: ExceedsMaxQuota.
    queues = [cq("a", {"first": {"gpu": 1 * GPU}, "second": {"gpu": 4 * GPU}})]
    flavors = [flavor("first"), flavor("second", taints=[GPU_TAINT])]
    result = run(queues, [wl("w", "a", 2)], flavors=flavors)
    assert result.reason("w") == "ExceedsMaxQuota"
    # In the other order as well.
    queues = [cq("a", {"second": {"gpu": 4 * GPU}, "first": {"gpu": 1 * GPU}})]
    result = run(queues, [wl("w", "a", 2)], flavors=flavors)
    assert result.reason("w") == "ExceedsMaxQuota"


def test_pending_reason_waiting_for_quota_is_less_severe_than_exceeding_it():
    # first can never hold 2 GPUs (ExceedsMaxQuota); second could, once b stops borrowing
    # (WaitingForQuota: 2 is above a's nominal 1, so no preemption). Either order: waiting.
    first, second = {"gpu": 1 * GPU}, {"gpu": 1 * GPU}
    for spec in ({"first": first, "second": second}, {"second": second, "first": first}):
        queues = [
            cq("a", spec, cohort="team"),
            cq("b", {"second": {"gpu": 3 * GPU}}, cohort="team"),
        ]
        result = run(queues, [admitted("b-used", "b", 4, flavor="second"), wl("w", "a", 2)])
        assert result.reason("w") == "WaitingForQuota"


# -- resource groups and pod sets -------------------------------------------------------------


def test_resources_of_one_group_get_the_same_flavor():
    queues = [
        cq("a", {"f1": {"cpu": 8 * CPU, "gpu": 1 * GPU}, "f2": {"cpu": 8 * CPU, "gpu": 4 * GPU}})
    ]
    result = run(queues, [wl("w", "a", requests={"cpu": 2 * CPU, "gpu": 2 * GPU})])
    assert (result.flavor("w", "cpu"), result.flavor("w", "gpu")) == ("f2", "f2")


def test_resource_groups_are_assigned_independently():
    queues = [
        cq(
            "a",
            groups=[
                {"cpu-pool": {"cpu": 8 * CPU}},
                {"gpu-x": {"gpu": 1 * GPU}, "gpu-y": {"gpu": 4 * GPU}},
            ],
        )
    ]
    result = run(queues, [wl("w", "a", requests={"cpu": 2 * CPU, "gpu": 2 * GPU})])
    assert (result.flavor("w", "cpu"), result.flavor("w", "gpu")) == ("cpu-pool", "gpu-y")


def test_resource_the_queue_does_not_cover_is_no_matching_flavor():
    result = run(two_flavor_queue(), [wl("w", "a", requests={"gpu": GPU, "memory": 1_000})])
    assert result.admitted == []
    assert result.reason("w") == "NoMatchingFlavor"


def test_zero_request_for_an_uncovered_resource_is_ignored():
    result = run(two_flavor_queue(), [wl("w", "a", requests={"gpu": GPU, "memory": 0})])
    assert result.admitted == ["w"]


def test_pods_are_counted_when_the_queue_covers_them():
    queues = [cq("a", {"default": {"gpu": 8 * GPU, "pods": 2_000}})]
    assert run(queues, [wl("w", "a", 1, count=2)]).admitted == ["w"]
    result = run(queues, [wl("w", "a", 1, count=3)])
    assert result.reason("w") == "ExceedsMaxQuota"


def test_later_pod_sets_see_the_quota_earlier_pod_sets_took():
    queues = [cq("a", {"f1": {"gpu": 3 * GPU}, "f2": {"gpu": 4 * GPU}})]
    sets = [pod_set(2, name="driver"), pod_set(1, 2, name="workers")]
    result = run(queues, [wl("w", "a", pod_sets=sets)])
    assert result.flavor("w", pod_set="driver") == "f1"
    assert result.flavor("w", pod_set="workers") == "f2"
