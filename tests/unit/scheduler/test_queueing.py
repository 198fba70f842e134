"""Queueing strategies inside a ClusterQueue (kueue-semantics §3).

Tests -> kueue-semantics §16 checklist items ("§3" where no item is about it):
  8   test_strict_fifo_head_blocks_smaller_workloads_behind_it
  8   test_best_effort_fifo_lets_a_smaller_workload_pass_a_parked_head
  8   test_best_effort_fifo_parks_workloads_of_the_same_shape_with_the_head
  8   test_parked_workload_waits_for_a_capacity_event
  8,9 test_strict_fifo_is_priority_first_too
  8   test_best_effort_fifo_keeps_an_in_flight_preemptor_at_the_head
  8   test_strict_fifo_does_not_keep_an_in_flight_preemptor_at_the_head
  8   test_strict_fifo_head_blocks_even_when_it_waits_for_preemption
  §3  test_inactive_cluster_queue_admits_nothing
  §3  test_workload_without_a_local_queue_stays_pending
  §3  test_workload_of_an_unknown_cluster_queue_stays_pending
"""

from __future__ import annotations

from tests.unit.scheduler.builders import LOWER, STRICT, admitted, gpu_cq, run, wl


def test_strict_fifo_head_blocks_smaller_workloads_behind_it():
    result = run(
        [gpu_cq("a", 4, strategy=STRICT)],
        [admitted("used", "a", 2), wl("head", "a", 4, created=0), wl("small", "a", 1, created=1)],
    )
    assert result.admitted == []
    assert result.pending["head"].parked is False
    assert result.reason("small") == "BlockedByHead"


def test_best_effort_fifo_lets_a_smaller_workload_pass_a_parked_head():
    result = run(
        [gpu_cq("a", 4)],
        [admitted("used", "a", 2), wl("head", "a", 4, created=0), wl("small", "a", 1, created=1)],
    )
    assert result.admitted == ["small"]
    assert result.pending["head"].parked is True
    assert result.reason("head") == "WaitingForQuota"


def test_best_effort_fifo_parks_workloads_of_the_same_shape_with_the_head():
    result = run(
        [gpu_cq("a", 4)],
        [
            admitted("used", "a", 2),
            wl("head", "a", 4, created=0),
            wl("twin", "a", 4, created=1),
            wl("small", "a", 1, created=2),
        ],
    )
    assert result.admitted == ["small"]
    assert result.pending["twin"].parked is True
    assert result.pending["twin"].message == result.pending["head"].message


def test_parked_workload_waits_for_a_capacity_event():
    # Parked (inadmissible) workloads are not popped until the caller requeues them, even if
    # quota is free now; the others go ahead.
    result = run(
        [gpu_cq("a", 4)],
        [wl("parked", "a", 2, priority=9, parked=True), wl("other", "a", 2, created=5)],
    )
    assert result.admitted == ["other"]
    assert "parked" not in result.pending


def test_strict_fifo_is_priority_first_too():
    result = run(
        [gpu_cq("a", 2, strategy=STRICT)],
        [wl("old", "a", 2, created=0), wl("urgent", "a", 2, priority=5, created=9)],
    )
    assert result.admitted == ["urgent"]
    assert "old" in result.pending


def test_best_effort_fifo_keeps_an_in_flight_preemptor_at_the_head():
    # p already evicts low; a newer, higher-priority q arrives. p stays the head: q is not even
    # looked at, and p keeps waiting for low.
    result = run(
        [gpu_cq("a", 4, within=LOWER)],
        [
            admitted("low", "a", 4, priority=0, evicting=True),
            wl("p", "a", 4, priority=5, created=0, preempting=True),
            wl("q", "a", 4, priority=10, created=5),
        ],
    )
    assert result.reason("p") == "WaitingForPreemptedWorkloads"
    assert "q" not in result.pending


def test_strict_fifo_does_not_keep_an_in_flight_preemptor_at_the_head():
    result = run(
        [gpu_cq("a", 4, within=LOWER, strategy=STRICT)],
        [
            admitted("low", "a", 4, priority=0, evicting=True),
            wl("p", "a", 4, priority=5, created=0, preempting=True),
            wl("q", "a", 4, priority=10, created=5),
        ],
    )
    assert result.reason("q") == "WaitingForPreemptedWorkloads"
    assert result.reason("p") == "BlockedByHead"


def test_strict_fifo_head_blocks_even_when_it_waits_for_preemption():
    result = run(
        [gpu_cq("a", 4, within=LOWER, strategy=STRICT)],
        [admitted("low", "a", 2), wl("p", "a", 4, priority=5), wl("small", "a", 1, created=9)],
    )
    assert result.preemptors == {"p": {"low"}}
    assert result.admitted == []
    assert result.reason("small") == "BlockedByHead"


def test_inactive_cluster_queue_admits_nothing():
    """Kueue workload_controller.go `getQueueBlocker`: Suspended, "ClusterQueue a is inactive"."""
    result = run([gpu_cq("a", 4, active=False)], [wl("w", "a", 1)])
    assert result.admitted == []
    assert result.reason("w") == "Suspended"
    assert result.pending["w"].message == "ClusterQueue a is inactive"


def test_workload_without_a_local_queue_stays_pending():
    """Kueue workload_controller.go `getQueueBlocker`: a missing LocalQueue is Misconfigured."""
    result = run([gpu_cq("a", 4)], [wl("w", None, 1)])
    assert result.reason("w") == "Misconfigured"


def test_workload_of_an_unknown_cluster_queue_stays_pending():
    """Kueue workload_controller.go `getQueueBlocker`: Misconfigured, "ClusterQueue ghost
    doesn't exist"."""
    result = run([gpu_cq("a", 4)], [wl("w", "ghost", 1)])
    assert result.admitted == []
    assert result.reason("w") == "Misconfigured"
    assert result.pending["w"].message == "ClusterQueue ghost doesn't exist"
