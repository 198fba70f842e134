"""Classical preemption (kueue-semantics §2.5, §6, §7): who is evicted, why, and when.

Tests -> kueue-semantics §16 checklist items ("§6" where no item is about it):
  2   test_preemptor_is_not_admitted_in_the_cycle_that_evicts_its_victims
  2   test_victims_keep_their_quota_until_their_pods_stop
  2   test_preemptor_is_admitted_once_its_victims_release_their_quota
  2   test_preemptor_usage_is_reserved_for_the_rest_of_the_cycle
  2   test_two_preemptors_never_claim_the_same_victim
  2   test_second_preemptor_sharing_a_victim_waits_for_it_instead_of_preempting_more
  3   test_preemption_requires_request_within_nominal_quota
  3   test_borrow_within_cohort_lets_a_request_above_nominal_reclaim
  3   test_borrow_within_cohort_spares_workloads_above_the_priority_threshold
  3   test_hierarchical_reclaim_lets_a_request_above_nominal_preempt
  3   test_request_above_nominal_cannot_preempt_when_its_cohort_subtree_is_in_use
  4   test_only_preempts_other_queue_while_it_is_above_nominal
  4   test_does_not_reclaim_from_a_queue_within_its_nominal_quota
  4   test_does_not_reclaim_from_a_queue_whose_cohort_is_within_its_quota
  4   test_workloads_of_an_inactive_queue_are_not_reclaimed
  5   test_reclaims_from_borrowing_queue_before_preempting_own_lower_priority
  5   test_lower_priority_victim_is_chosen_first
  5   test_most_recently_admitted_victim_is_chosen_first_among_equal_priority
  5   test_fill_back_keeps_victims_that_are_not_needed
  5   test_workload_already_being_evicted_is_chosen_first
  5   test_hierarchical_reclaim_candidates_come_before_priority_candidates
  7   test_no_candidate_preemption_reserves_quota_for_the_rest_of_the_cycle
  7   test_no_candidate_preemption_reserves_nothing_when_reclaim_within_cohort_is_any
  7   test_borrowing_no_candidate_reservation_is_capped_by_the_borrowing_limit
  §6  test_never_policy_preempts_nothing
  §6  test_lower_priority_policy_spares_equal_priority
  §6  test_lower_or_newer_equal_priority_preempts_a_newer_peer_only
  §6  test_reclaim_policy_lower_priority_spares_higher_priority_borrowers
  §6  test_only_workloads_using_the_contested_flavor_are_victims
"""

from __future__ import annotations

from tests.unit.scheduler.builders import (
    ANY,
    GPU,
    LOWER,
    LOWER_OR_NEWER,
    STRICT,
    admitted,
    cohort,
    cq,
    gpu_cq,
    quota,
    run,
    wl,
)

IN_CQ = "InClusterQueue"
RECLAIM = "InCohortReclamation"
WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


def reasons(result) -> dict[str, str]:
    return {key: reason.value for key, reason in result.victims.items()}


# -- 2: preemption and the cycle ---------------------------------------------------------------


def test_preemptor_is_not_admitted_in_the_cycle_that_evicts_its_victims():
    result = run(
        [gpu_cq("a", 4, within=LOWER)],
        [admitted("low", "a", 4, priority=0), wl("p", "a", 4, priority=10)],
    )
    assert result.admitted == []
    assert result.preemptors == {"p": {"low"}}
    assert reasons(result) == {"low": IN_CQ}
    assert result.reason("p") == "WaitingForPreemptedWorkloads"
    assert result.pending["p"].parked is False


def test_victims_keep_their_quota_until_their_pods_stop():
    # The next pass: low is being evicted but its pods still run. Nothing new is preempted and
    # nobody, not even another queue's workload, gets low's quota yet.
    queues = [gpu_cq("a", 4, cohort="team", within=LOWER), gpu_cq("b", 0, cohort="team")]
    result = run(
        queues,
        [
            admitted("low", "a", 4, priority=0, evicting=True),
            wl("p", "a", 4, priority=10, preempting=True),
            wl("b1", "b", 1),
        ],
    )
    assert result.admitted == []
    assert result.decisions.preemptions == ()
    assert result.reason("p") == "WaitingForPreemptedWorkloads"
    assert "b1" in result.pending


def test_preemptor_is_admitted_once_its_victims_release_their_quota():
    result = run([gpu_cq("a", 4, within=LOWER)], [wl("p", "a", 4, priority=10, preempting=True)])
    assert result.admitted == ["p"]


def test_preemptor_usage_is_reserved_for_the_rest_of_the_cycle():
    # a: 4, b: 0. old uses 2 of a's 4, so 2 GPUs are free. p preempts old for 4 GPUs; b1 would
    # fit in the free 2, but p's usage is reserved for the rest of the cycle.
    queues = [gpu_cq("a", 4, cohort="team", within=LOWER), gpu_cq("b", 0, cohort="team")]
    result = run(
        queues,
        [admitted("old", "a", 2, priority=0), wl("p", "a", 4, priority=10), wl("b1", "b", 2)],
    )
    assert result.preemptors == {"p": {"old"}}
    assert result.admitted == []
    assert "b1" in result.pending


def test_two_preemptors_never_claim_the_same_victim():
    # a: 2, b: 2, c: 0 borrowing all 4 with c1 and c2. Both pa and pb would first pick c2 (the
    # most recently admitted); pb, processed second, recomputes without c2 and takes c1.
    queues = [
        gpu_cq("a", 2, cohort="team", reclaim=LOWER),
        gpu_cq("b", 2, cohort="team", reclaim=LOWER),
        gpu_cq("c", 0, cohort="team"),
    ]
    result = run(
        queues,
        [
            admitted("c1", "c", 2, reserved_at=1),
            admitted("c2", "c", 2, reserved_at=2),
            wl("pa", "a", 2, priority=10, created=0),
            wl("pb", "b", 2, priority=10, created=1),
        ],
    )
    assert result.preemptors == {"pa": {"c2"}, "pb": {"c1"}}
    assert reasons(result) == {"c1": RECLAIM, "c2": RECLAIM}


def test_second_preemptor_sharing_a_victim_waits_for_it_instead_of_preempting_more():
    # c1 borrows all 4 GPUs. Evicting c1 makes room for both pa and pb: pb fits once pa's
    # victim is gone (Kueue's DeferredFit), so it waits without preempting anything itself.
    queues = [
        gpu_cq("a", 2, cohort="team", reclaim=LOWER),
        gpu_cq("b", 2, cohort="team", reclaim=LOWER),
        gpu_cq("c", 0, cohort="team"),
    ]
    result = run(
        queues,
        [
            admitted("c1", "c", 4),
            wl("pa", "a", 2, priority=10, created=0),
            wl("pb", "b", 2, priority=10, created=1),
        ],
    )
    assert result.preemptors == {"pa": {"c1"}}
    assert result.admitted == []
    assert result.reason("pb") == "WaitingForPreemptedWorkloads"
    # Once c1 has stopped, both are admitted.
    after = run(
        queues,
        [wl("pa", "a", 2, priority=10, preempting=True), wl("pb", "b", 2, priority=10, created=1)],
    )
    assert sorted(after.admitted) == ["pa", "pb"]


# -- 3: who may preempt at all ------------------------------------------------------------------


def test_preemption_requires_request_within_nominal_quota():
    # Kueue's "A workload is only eligible to do preemptions if it fits fully within nominal
    # quota": incoming asks 3 of alpha's nominal 2; a1 is lower priority but stays.
    queues = [
        gpu_cq("alpha", 2, cohort="other", reclaim=ANY, within=LOWER),
        gpu_cq("beta", 2, cohort="other"),
    ]
    result = run(
        queues,
        [
            admitted("a1", "alpha", 1, priority=-1),
            admitted("b1", "beta", 1, priority=-1),
            wl("incoming", "alpha", 3, priority=1),
        ],
    )
    assert result.victims == {}
    assert result.reason("incoming") == "WaitingForQuota"
    assert result.pending["incoming"].parked is True


def test_borrow_within_cohort_lets_a_request_above_nominal_reclaim():
    # a: 2, b: 2, c: 2 (idle, lent to b). a asks 4: above its nominal, so only
    # borrowWithinCohort lets it reclaim b's borrowed GPUs, and it will borrow c's afterwards.
    queues = [
        gpu_cq("a", 2, cohort="team", reclaim=LOWER, borrow_within=LOWER),
        gpu_cq("b", 2, cohort="team"),
        gpu_cq("c", 2, cohort="team"),
    ]
    workloads = [
        admitted("b1", "b", 2, reserved_at=1),
        admitted("b2", "b", 2, reserved_at=2),
        wl("p", "a", 4, priority=10),
    ]
    result = run(queues, workloads)
    assert reasons(result) == {"b2": WHILE_BORROWING}
    # The same without borrowWithinCohort: a must not preempt to borrow.
    queues[0] = gpu_cq("a", 2, cohort="team", reclaim=LOWER)
    result = run(queues, workloads)
    assert result.victims == {}
    assert result.reason("p") == "WaitingForQuota"


def test_borrow_within_cohort_spares_workloads_above_the_priority_threshold():
    queues = [
        gpu_cq("a", 2, cohort="team", reclaim=LOWER, borrow_within=LOWER, threshold=3),
        gpu_cq("b", 2, cohort="team"),
        gpu_cq("c", 2, cohort="team"),
    ]
    result = run(
        queues,
        [
            admitted("b1", "b", 2, priority=5, reserved_at=1),
            admitted("b2", "b", 2, priority=5, reserved_at=2),
            wl("p", "a", 4, priority=10),
        ],
    )
    assert result.victims == {}
    assert "p" in result.pending


def test_hierarchical_reclaim_lets_a_request_above_nominal_preempt():
    # org ── ml ── {a: 2, b: 2};  org ── web ── {c: 4}.  c borrows all of ml's 4 GPUs.
    # a asks 4 (> its nominal 2) but ml's subtree covers it: a reclaims from c whatever the
    # priorities (reclaimWithinCohort: Any), without borrowWithinCohort.
    cohorts = [cohort("org"), cohort("ml", "org"), cohort("web", "org")]
    queues = [
        gpu_cq("a", 2, cohort="ml", reclaim=ANY),
        gpu_cq("b", 2, cohort="ml"),
        gpu_cq("c", 4, cohort="web"),
    ]
    result = run(
        queues,
        [
            admitted("c1", "c", 4, priority=50, reserved_at=1),
            admitted("c2", "c", 4, priority=50, reserved_at=2),
            wl("p", "a", 4, priority=10),
        ],
        cohorts=cohorts,
    )
    assert reasons(result) == {"c2": RECLAIM}


def test_request_above_nominal_cannot_preempt_when_its_cohort_subtree_is_in_use():
    # org (owns 2) ── ml ── {a: 2, b: 2};  org ── web ── {c: 4, d: 0}.
    # b uses its 2, c borrows 2 of ml's: ml's subtree no longer covers a's 4, so a may not
    # preempt (NoFit, nothing reserved) and d can still take org's free 2 GPUs.
    cohorts = [
        cohort("org", flavors={"default": {"gpu": 2 * GPU}}),
        cohort("ml", "org"),
        cohort("web", "org"),
    ]
    queues = [
        gpu_cq("a", 2, cohort="ml", reclaim=ANY),
        gpu_cq("b", 2, cohort="ml"),
        gpu_cq("c", 4, cohort="web"),
        gpu_cq("d", 0, cohort="web"),
    ]
    result = run(
        queues,
        [
            admitted("b1", "b", 2),
            admitted("c1", "c", 4, reserved_at=1),
            admitted("c2", "c", 2, reserved_at=2),
            wl("p", "a", 4, priority=10),
            wl("d1", "d", 2, priority=0),
        ],
        cohorts=cohorts,
    )
    assert result.victims == {}
    assert result.reason("p") == "WaitingForQuota"
    assert result.admitted == ["d1"]


# -- 4: other queues' workloads only while their queue borrows ---------------------------------


def test_only_preempts_other_queue_while_it_is_above_nominal():
    # a: 4, b: 4. b borrows 2 (b1, b2, b3); a uses 2 (a-old). p needs 4: evicting b3 brings b
    # back to its nominal quota, so b2 and b1 are off limits and a-old goes instead.
    queues = [
        gpu_cq("a", 4, cohort="team", within=LOWER, reclaim=LOWER),
        gpu_cq("b", 4, cohort="team"),
    ]
    result = run(
        queues,
        [
            admitted("a-old", "a", 2, reserved_at=0),
            admitted("b1", "b", 2, reserved_at=1),
            admitted("b2", "b", 2, reserved_at=2),
            admitted("b3", "b", 2, reserved_at=3),
            wl("p", "a", 4, priority=10),
        ],
    )
    assert reasons(result) == {"b3": RECLAIM, "a-old": IN_CQ}


def test_does_not_reclaim_from_a_queue_within_its_nominal_quota():
    queues = [
        gpu_cq("a", 2, cohort="team", within=LOWER, reclaim=ANY),
        gpu_cq("b", 2, cohort="team"),
    ]
    result = run(
        queues,
        [
            admitted("vip", "a", 2, priority=100),
            admitted("b1", "b", 2),
            wl("p", "a", 2, priority=10),
        ],
    )
    assert result.victims == {}
    assert "p" in result.pending


def test_does_not_reclaim_from_a_queue_whose_cohort_is_within_its_quota():
    # org ── ml ── {a: 4, d: 0};  org ── web ── {b: 0, c: 4}.
    # d borrows a's 4 inside ml; b borrows c's 4 inside web, so web as a whole is within its
    # quota and b1 is web's business: a reclaims from d, although b1 was admitted more recently.
    cohorts = [cohort("org"), cohort("ml", "org"), cohort("web", "org")]
    queues = [
        gpu_cq("a", 4, cohort="ml", reclaim=LOWER),
        gpu_cq("d", 0, cohort="ml"),
        gpu_cq("b", 0, cohort="web"),
        gpu_cq("c", 4, cohort="web"),
    ]
    result = run(
        queues,
        [
            admitted("d1", "d", 4, reserved_at=1),
            admitted("b1", "b", 4, reserved_at=5),
            wl("p", "a", 4, priority=10),
        ],
        cohorts=cohorts,
    )
    assert reasons(result) == {"d1": RECLAIM}


# -- 5: candidate order and fill-back ------------------------------------------------------------


def test_reclaims_from_borrowing_queue_before_preempting_own_lower_priority():
    # a: 4, b: 2. b borrows 2. a-low is a's own, lower priority than b's workloads.
    queues = [
        gpu_cq("a", 4, cohort="team", within=LOWER, reclaim=LOWER),
        gpu_cq("b", 2, cohort="team"),
    ]
    result = run(
        queues,
        [
            admitted("a-low", "a", 2, priority=0),
            admitted("b1", "b", 2, priority=3, reserved_at=1),
            admitted("b2", "b", 2, priority=5, reserved_at=2),
            wl("p", "a", 2, priority=10),
        ],
    )
    assert reasons(result) == {"b1": RECLAIM}


def test_lower_priority_victim_is_chosen_first():
    result = run(
        [gpu_cq("a", 4, within=LOWER)],
        [
            admitted("old-low", "a", 2, priority=0, reserved_at=0),
            admitted("new-mid", "a", 2, priority=5, reserved_at=9),
            wl("p", "a", 2, priority=10),
        ],
    )
    assert reasons(result) == {"old-low": IN_CQ}


def test_most_recently_admitted_victim_is_chosen_first_among_equal_priority():
    result = run(
        [gpu_cq("a", 4, within=LOWER)],
        [
            admitted("early", "a", 2, reserved_at=0),
            admitted("late", "a", 2, reserved_at=5),
            wl("p", "a", 2, priority=10),
        ],
    )
    assert reasons(result) == {"late": IN_CQ}


def test_fill_back_keeps_victims_that_are_not_needed():
    # small is tried first (most recent) but is not enough; once big is out, small fits back.
    result = run(
        [gpu_cq("a", 6, within=LOWER)],
        [
            admitted("big", "a", 4, reserved_at=0),
            admitted("small", "a", 2, reserved_at=1),
            wl("p", "a", 4, priority=10),
        ],
    )
    assert reasons(result) == {"big": IN_CQ}


def test_workload_already_being_evicted_is_chosen_first():
    # going is already being evicted (higher priority than low, but lower than p): p counts on
    # it and preempts nothing new.
    result = run(
        [gpu_cq("a", 4, within=LOWER)],
        [
            admitted("going", "a", 2, priority=5, evicting=True, reserved_at=0),
            admitted("low", "a", 2, priority=0, reserved_at=1),
            wl("p", "a", 2, priority=10),
        ],
    )
    assert result.decisions.preemptions == ()
    assert result.reason("p") == "WaitingForPreemptedWorkloads"
    assert "1 workload" in result.pending["p"].message


def test_hierarchical_reclaim_candidates_come_before_priority_candidates():
    # org ── ml ── {a: 2, x: 2, y: 4};  org ── web ── {c: 2}.  org is full: x1 borrows 1 in ml,
    # c1 borrows 5 from org. a asks 3: ml covers it, so a has a hierarchical advantage over c
    # (outside ml) but not over x (inside ml). c1 goes although x1 has the lower priority.
    cohorts = [cohort("org"), cohort("ml", "org"), cohort("web", "org")]
    queues = [
        gpu_cq("a", 2, cohort="ml", reclaim=LOWER, borrow_within=LOWER),
        gpu_cq("x", 2, cohort="ml"),
        gpu_cq("y", 4, cohort="ml"),
        gpu_cq("c", 2, cohort="web"),
    ]
    result = run(
        queues,
        [
            admitted("x1", "x", 3, priority=0),
            admitted("c1", "c", 7, priority=5),
            wl("p", "a", 3, priority=10),
        ],
        cohorts=cohorts,
    )
    assert reasons(result) == {"c1": RECLAIM}


# -- 7: preemption without candidates still holds quota ----------------------------------------


def test_no_candidate_preemption_reserves_quota_for_the_rest_of_the_cycle():
    # a: 4 (StrictFIFO, so p stays its head cycle after cycle), b: 0. vip (not preemptible)
    # uses 2. p needs preemption but finds no candidate; its request is still held for the
    # rest of each cycle, so b1 (processed after p: it borrows) never gets the free 2 GPUs.
    queues = [
        gpu_cq("a", 4, cohort="team", within=LOWER, strategy=STRICT),
        gpu_cq("b", 0, cohort="team"),
    ]
    workloads = [
        admitted("vip", "a", 2, priority=100),
        wl("p", "a", 4, priority=10),
        wl("b1", "b", 2),
    ]
    result = run(queues, workloads)
    assert result.victims == {}
    assert result.admitted == []
    assert result.reason("p") == "WaitingForQuota"
    assert "b1" in result.pending
    # A BestEffortFIFO head is parked instead and holds nothing in the following cycles.
    queues[0] = gpu_cq("a", 4, cohort="team", within=LOWER)
    result = run(queues, workloads)
    assert result.admitted == ["b1"]
    assert result.pending["p"].parked is True


def test_no_candidate_preemption_reserves_nothing_when_reclaim_within_cohort_is_any():
    queues = [
        gpu_cq("a", 4, cohort="team", within=LOWER, reclaim=ANY, strategy=STRICT),
        gpu_cq("b", 0, cohort="team"),
    ]
    result = run(
        queues,
        [admitted("vip", "a", 2, priority=100), wl("p", "a", 4, priority=10), wl("b1", "b", 2)],
    )
    assert result.admitted == ["b1"]
    assert "p" in result.pending


def test_borrowing_no_candidate_reservation_is_capped_by_the_borrowing_limit():
    # a: 2 (borrowingLimit 1, StrictFIFO), b: 4, c: 0, e: 0; 6 GPUs, 4 in use. p (2 GPUs) would
    # borrow, finds no candidate and reserves min(2, nominal 2 + limit 1 - usage 2) = 1 GPU:
    # one GPU is left, too little for c1 (2) but enough for e1 (1).
    queues = [
        cq(
            "a",
            {"default": {"gpu": quota(2 * GPU, borrow=1 * GPU)}},
            cohort="team",
            within=LOWER,
            strategy=STRICT,
        ),
        gpu_cq("b", 4, cohort="team"),
        gpu_cq("c", 0, cohort="team"),
        gpu_cq("e", 0, cohort="team"),
    ]
    result = run(
        queues,
        [
            admitted("vip", "a", 2, priority=100),
            admitted("b-used", "b", 2),
            wl("p", "a", 2, priority=10),
            wl("c1", "c", 2, priority=5),
            wl("e1", "e", 1, priority=0),
        ],
    )
    assert result.victims == {}
    assert result.admitted == ["e1"]
    assert {"p", "c1"} <= set(result.pending)


# -- policies ------------------------------------------------------------------------------------


def test_never_policy_preempts_nothing():
    result = run(
        [gpu_cq("a", 2)], [admitted("low", "a", 2, priority=-10), wl("p", "a", 2, priority=10)]
    )
    assert result.victims == {}


def test_lower_priority_policy_spares_equal_priority():
    result = run(
        [gpu_cq("a", 2, within=LOWER)],
        [admitted("peer", "a", 2, priority=5), wl("p", "a", 2, priority=5)],
    )
    assert result.victims == {}


def test_lower_or_newer_equal_priority_preempts_a_newer_peer_only():
    queue = [gpu_cq("a", 2, within=LOWER_OR_NEWER)]
    newer = run(
        queue,
        [admitted("peer", "a", 2, priority=5, created=10), wl("p", "a", 2, priority=5, created=1)],
    )
    assert reasons(newer) == {"peer": IN_CQ}
    older = run(
        queue,
        [admitted("peer", "a", 2, priority=5, created=0), wl("p", "a", 2, priority=5, created=1)],
    )
    assert older.victims == {}


def test_reclaim_policy_lower_priority_spares_higher_priority_borrowers():
    queues = [gpu_cq("a", 2, cohort="team", reclaim=LOWER), gpu_cq("b", 0, cohort="team")]
    result = run(queues, [admitted("b-vip", "b", 2, priority=50), wl("p", "a", 2, priority=10)])
    assert result.victims == {}


def test_workloads_of_an_inactive_queue_are_not_reclaimed():
    # b is stopped (Hold): its admitted workload keeps its quota, but Kueue's snapshot leaves
    # the queue out, so nothing of b's can be chosen as a victim.
    queues = [
        gpu_cq("a", 2, cohort="team", reclaim=ANY),
        gpu_cq("b", 0, cohort="team", active=False),
    ]
    result = run(queues, [admitted("b1", "b", 2), wl("p", "a", 2, priority=10)])
    assert result.victims == {}
    assert result.admitted == []


def test_only_workloads_using_the_contested_flavor_are_victims():
    queues = [cq("a", {"f1": {"gpu": 2 * GPU}, "f2": {"gpu": 2 * GPU}}, within=LOWER)]
    result = run(
        queues,
        [
            admitted("on-f1", "a", 2, flavor="f1", priority=0, reserved_at=0),
            admitted("on-f2", "a", 2, flavor="f2", priority=-5, reserved_at=1),
            wl("p", "a", 2, priority=10),
        ],
    )
    assert reasons(result) == {"on-f1": IN_CQ}
