"""Which pending workload goes first: heads per ClusterQueue and the order of a cycle's entries.

Tests -> kueue-semantics §16 checklist items:
  1   test_one_head_per_cluster_queue_per_cycle
  1   test_entry_within_nominal_quota_goes_before_a_borrowing_entry
  1   test_lower_borrowing_level_goes_first_in_a_hierarchical_cohort
  1   test_higher_priority_entry_goes_first_at_equal_borrowing_level
  1   test_older_entry_goes_first_at_equal_priority
  1,9 test_entries_of_different_queues_tie_break_by_creation_then_key
  9   test_equal_priority_ties_break_by_creation_then_key
  9   test_higher_priority_is_admitted_before_an_older_workload
  9   test_default_priority_zero_outranks_negative_priority
  1,9 test_queue_without_cohort_admits_in_priority_order_until_full
"""

from __future__ import annotations

from scheduler import schedule
from tests.unit.scheduler.builders import (
    GPU,
    Result,
    admitted,
    cohort,
    cq,
    gpu_cq,
    run,
    snapshot,
    wl,
)


def test_one_head_per_cluster_queue_per_cycle():
    # a2 has the higher priority and fits within a's nominal quota, but only a's head (a1) is
    # looked at in the first cycle, together with b's head, which borrows the rest.
    queues = [gpu_cq("a", 4, cohort="team"), gpu_cq("b", 0, cohort="team")]
    result = run(
        queues,
        [
            wl("a1", "a", 2, priority=10, created=1),
            wl("a2", "a", 2, priority=10, created=2),
            wl("b1", "b", 2, priority=0, created=0),
        ],
    )
    assert result.admitted == ["a1", "b1"]
    assert "a2" in result.pending
    assert result.decisions.cycles >= 2


def test_entry_within_nominal_quota_goes_before_a_borrowing_entry():
    # Only 2 GPUs are left in the cohort. b's head fits in b's own quota, a's head would borrow:
    # b goes first although a's head has a higher priority and is older.
    queues = [gpu_cq("a", 0, cohort="team"), gpu_cq("b", 4, cohort="team")]
    result = run(
        queues,
        [
            admitted("b-old", "b", 2),
            wl("a-hi", "a", 2, priority=100, created=0),
            wl("b-lo", "b", 2, priority=0, created=5),
        ],
    )
    assert result.admitted == ["b-lo"]
    assert "a-hi" in result.pending


def test_lower_borrowing_level_goes_first_in_a_hierarchical_cohort():
    # org (owns 2 GPUs) ── ml ── {x: 2, y: 0}
    #                   └─ web ── {z: 0}
    # y1 can be covered by ml's subtree (x's unused 2): borrowing level 1 (ml's height).
    # z1 needs org's quota: level 2. z1 has the higher priority and is older, yet y1 goes
    # first, and then the 4 GPUs z1 needs are no longer there.
    cohorts = [
        cohort("org", flavors={"default": {"gpu": 2 * GPU}}),
        cohort("ml", "org"),
        cohort("web", "org"),
    ]
    queues = [
        gpu_cq("x", 2, cohort="ml"),
        gpu_cq("y", 0, cohort="ml"),
        gpu_cq("z", 0, cohort="web"),
    ]
    result = run(
        queues,
        [wl("y1", "y", 2, priority=0, created=9), wl("z1", "z", 4, priority=50, created=0)],
        cohorts=cohorts,
    )
    assert result.admitted == ["y1"]
    assert result.reason("z1") == "WaitingForQuota"
    # Alone, z1 fits: the whole of org's 4 GPUs is reachable from z.
    assert run(queues, [wl("z1", "z", 4)], cohorts=cohorts).admitted == ["z1"]


def test_higher_priority_entry_goes_first_at_equal_borrowing_level():
    queues = [gpu_cq("a", 1, cohort="team"), gpu_cq("b", 1, cohort="team")]
    result = run(
        queues,
        [wl("a1", "a", 2, priority=1, created=0), wl("b1", "b", 2, priority=5, created=10)],
    )
    assert result.admitted == ["b1"]
    assert "a1" in result.pending


def test_older_entry_goes_first_at_equal_priority():
    queues = [gpu_cq("a", 1, cohort="team"), gpu_cq("b", 1, cohort="team")]
    result = run(
        queues,
        [wl("a1", "a", 2, priority=5, created=3), wl("b1", "b", 2, priority=5, created=1)],
    )
    assert result.admitted == ["b1"]


def test_entries_of_different_queues_tie_break_by_creation_then_key():
    queues = [gpu_cq("a", 1, cohort="team"), gpu_cq("b", 1, cohort="team")]
    result = run(queues, [wl("w-b", "a", 2, created=1), wl("w-a", "b", 2, created=1)])
    assert result.admitted == ["w-a"]


def test_equal_priority_ties_break_by_creation_then_key():
    queue = [gpu_cq("a", 2)]
    # Same shape, same priority: the oldest is the head and takes the quota.
    result = run(
        queue,
        [wl("w-b", "a", 2, created=5), wl("w-a", "a", 2, created=5), wl("w-c", "a", 2, created=4)],
    )
    assert result.admitted == ["w-c"]
    # Same creation time: the key (Kueue's UID) decides.
    result = run(queue, [wl("w-b", "a", 2, created=5), wl("w-a", "a", 2, created=5)])
    assert result.admitted == ["w-a"]


def test_higher_priority_is_admitted_before_an_older_workload():
    result = run(
        [gpu_cq("a", 2)], [wl("old", "a", 2, created=0), wl("new", "a", 2, priority=1, created=9)]
    )
    assert result.admitted == ["new"]
    assert "old" in result.pending


def test_default_priority_zero_outranks_negative_priority():
    result = run(
        [gpu_cq("a", 2)],
        [wl("negative", "a", 2, priority=-1, created=0), wl("default", "a", 2, created=9)],
    )
    assert result.admitted == ["default"]


def test_queue_without_cohort_admits_in_priority_order_until_full():
    result = run(
        [cq("a", {"default": {"gpu": 3 * GPU}})],
        [wl(f"w{i}", "a", 1, priority=i, created=float(i)) for i in range(5)],
    )
    assert result.admitted == ["w4", "w3", "w2"]
    assert set(result.pending) == {"w1", "w0"}


def test_admission_budget_stops_admitting_in_queue_order_and_leaves_the_rest_for_later():
    # An API-bound Kueue (max_admissions) admits the best entries first; the rest stay pending,
    # undecided, for the next call.
    queue = gpu_cq("a", 8)
    workloads = [wl(f"w{i}", "a", 1, priority=i, created=i) for i in range(5)]
    result = Result(schedule(snapshot([queue], workloads), max_admissions=2))
    assert result.admitted == ["w4", "w3"]
    assert not {"w0", "w1", "w2"} & set(result.admitted)
