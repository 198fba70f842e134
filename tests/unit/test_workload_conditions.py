"""Kueue's Workload conditions, as Accelplane derives them from a workload's state."""

from __future__ import annotations

from workloads.models import Workload


def conditions(**fields):
    return {c["type"]: c for c in Workload(**fields).conditions}


def test_pending_workload_shows_quota_not_reserved_with_the_scheduler_reason():
    found = conditions(
        phase="Pending", pending_reason="WaitingForQuota", pending_message="6 more needed"
    )
    assert found["QuotaReserved"]["status"] == "False"
    assert found["QuotaReserved"]["reason"] == "WaitingForQuota"
    assert found["QuotaReserved"]["message"] == "6 more needed"
    assert found["Admitted"]["status"] == "False"


def test_admitted_workload_has_quota_reserved_and_admitted():
    found = conditions(phase="Admitted", cluster_queue_name="cq")
    assert (found["QuotaReserved"]["status"], found["Admitted"]["status"]) == ("True", "True")


def test_preempted_workload_waiting_again_is_requeued_with_the_preemption_reason():
    found = conditions(phase="Pending", preemptions=1, preemption_reason="InClusterQueue")
    assert found["Preempted"]["reason"] == "InClusterQueue"
    assert found["Requeued"]["status"] == "True"


def test_finished_workload_has_the_finished_condition():
    assert conditions(phase="Finished")["Finished"]["status"] == "True"
