"""The scenario expectations of what people look at in Kueue: why a workload was preempted
(`preemptionReason`), why it waits (`pendingReason`) and each flavor's usage (`usageByFlavor`)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from tests.support import job
from workloads import scenarios, status
from workloads.models import Workload

# Two flavors of 4 GPUs each: low-a fills on-demand, low-b spot; high preempts low-a.
QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: on-demand}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: spot}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: gpu-queue}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
    - coveredResources: [cpu, memory, nvidia.com/gpu]
      flavors:
        - name: on-demand
          resources:
            - {name: cpu, nominalQuota: 24}
            - {name: memory, nominalQuota: 96Gi}
            - {name: nvidia.com/gpu, nominalQuota: 4}
        - name: spot
          resources:
            - {name: cpu, nominalQuota: 24}
            - {name: memory, nominalQuota: 96Gi}
            - {name: nvidia.com/gpu, nominalQuota: 4}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-llm, namespace: llm}
spec: {clusterQueue: gpu-queue}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 100
"""
GPU = "nvidia.com/gpu"
LOW_A, HIGH, LOST = "Job/llm/low-a", "Job/llm/high", "Job/llm/lost"


def apply(text):
    return {"apply": {"manifest": text}, "namespace": "llm"}


STEPS = [
    apply(QUEUES),
    apply(job("low-a")),
    apply(job("low-b")),
    # 3: 4 GPUs, 2 cpu and 8Gi in each flavor; quantities compare as quantities.
    {"expect": {"ClusterQueue/gpu-queue": {"usageByFlavor": {
        "on-demand": {GPU: "4"}, "spot": {GPU: "4000m", "memory": "8192Mi"}}}}},
    {"expect": {"ClusterQueue/gpu-queue": {"usageByFlavor": {
        "on-demand": {GPU: "2"}, "spot": {"cpu": "2"}}}}},
    apply(job("high", priority_class="high")),
    apply(job("lost").replace("team-llm", "missing")),
    # 7: low-a preempted within its ClusterQueue, waits for quota; lost has no LocalQueue.
    {"expect": {
        LOW_A: {"preemptionReason": "InClusterQueue", "pendingReason": "WaitingForQuota"},
        LOST: {"pendingReason": "Misconfigured"},
        "ClusterQueue/gpu-queue": {"usageByFlavor": {"on-demand": {GPU: "4"}}},
    }},
    {"expect": {
        LOW_A: {"preemptionReason": "InCohortReclamation", "pendingReason": "Misconfigured"},
        HIGH: {"preemptionReason": "InClusterQueue", "pendingReason": "WaitingForQuota"},
    }},
    {"expect": {"ClusterQueue/gpu-queue": {"usageByFlavor": {"on-demand": {GPU: "lots"}}}}},
    {"expect": {"ClusterQueue/gpu-queue": {"usageByFlavor": {"on-demand": 4}}}},
]  # fmt: skip


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("scenario") / "reasons.yaml"
    pool = {"name": "p", "machineType": "g2-standard-24", "nodes": 4}
    cluster = {"name": "c", "nodePools": [pool]}
    path.write_text(yaml.safe_dump({"name": "reasons", "cluster": cluster, "steps": STEPS}))
    return path


@pytest.fixture(scope="module")
def report(scenario_file, django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():  # the replay rolls its own transaction back
        return scenarios.run(scenario_file)


def failures(report, index):
    found = report.steps[index]["failures"]
    return {(f["object"], f["field"]): (f["expected"], f["actual"]) for f in found}


def test_usage_by_flavor_holds_each_flavors_usage_compared_as_quantities(report):
    """Kueue's ClusterQueue status.flavorsReservation (pkg/controller/core/
    clusterqueue_controller.go, `updateCqStatusIfChanged`): what `usage` sums, per flavor."""
    assert failures(report, 3) == {}
    found = report.steps[3]["objects"]["ClusterQueue/gpu-queue"]["usageByFlavor"]
    assert found == {
        "on-demand": {"cpu": "2", "memory": "8Gi", GPU: "4"},
        "spot": {"cpu": "2", "memory": "8Gi", GPU: "4"},
    }


def test_a_wrong_usage_by_flavor_fails_naming_the_flavors_usage(report):
    assert failures(report, 4) == {
        ("ClusterQueue/gpu-queue", "usageByFlavor"): (
            {"on-demand": {GPU: "2"}, "spot": {"cpu": "2"}},
            {"on-demand": {"cpu": "2", "memory": "8Gi", GPU: "4"},
             "spot": {"cpu": "2", "memory": "8Gi", GPU: "4"}},
        )
    }  # fmt: skip


def test_preemption_and_pending_reasons_are_kueues_condition_reasons(report):
    """Kueue's Preempted condition reason (apis/kueue/v1beta2/workload_types.go,
    InClusterQueueReason, set by workload.SetPreemptedCondition) and QuotaReserved=False
    reasons (WorkloadQuotaReservedReasonWaitingForQuota, ...Misconfigured)."""
    assert failures(report, 7) == {}
    objects = report.steps[7]["objects"]
    assert objects[LOW_A]["preemptionReason"] == "InClusterQueue"
    assert objects[LOW_A]["pendingReason"] == "WaitingForQuota"
    assert "pendingReason" not in objects[HIGH]  # admitted: not waiting
    assert "preemptionReason" not in objects[HIGH]  # never preempted


def test_wrong_reasons_and_reasons_of_a_workload_that_has_none_fail(report):
    assert failures(report, 8) == {
        (LOW_A, "preemptionReason"): ("InCohortReclamation", "InClusterQueue"),
        (LOW_A, "pendingReason"): ("Misconfigured", "WaitingForQuota"),
        (HIGH, "preemptionReason"): ("InClusterQueue", None),
        (HIGH, "pendingReason"): ("WaitingForQuota", None),
    }


@pytest.mark.parametrize(
    ("index", "message"),
    [
        (9, "expect.ClusterQueue/gpu-queue.usageByFlavor.on-demand.nvidia.com/gpu: 'lots'"),
        (10, "expect.ClusterQueue/gpu-queue.usageByFlavor.on-demand: 4 must map resource"),
    ],
)
def test_a_malformed_usage_by_flavor_is_a_step_error_naming_the_field(report, index, message):
    assert report.steps[index]["error"].startswith(message)
    assert report.steps[index]["failures"]
    assert not report.ok


@pytest.mark.django_db(transaction=True)
def test_the_json_report_carries_the_reasons_and_the_usage_by_flavor(scenario_file):
    out = StringIO()
    with pytest.raises(CommandError):  # steps 4, 8, 9 and 10 fail
        call_command("replay", str(scenario_file), "--json", stdout=out)
    step = json.loads(out.getvalue())["steps"][7]
    assert step["objects"][LOW_A]["preemptionReason"] == "InClusterQueue"
    assert step["objects"][LOST]["pendingReason"] == "Misconfigured"
    assert step["objects"]["ClusterQueue/gpu-queue"]["usageByFlavor"]["spot"][GPU] == "4"


def workload(**fields):
    return Workload(phase=Workload.Phase.PENDING, **fields)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({}, ""),
        ({"eviction_reason": "Preempted", "preemption_reason": "InCohortReclamation"},
         "InCohortReclamation"),
        # Evicted by waitForPodsReady after an earlier preemption: the latest eviction counts.
        ({"eviction_reason": "PodsReadyTimeout", "preemption_reason": "InClusterQueue"},
         "PodsReadyTimeout"),
        # The GKE provider clears the eviction reason at re-admission; the preemption's stays.
        ({"eviction_reason": "", "preemption_reason": "InCohortFairSharing"},
         "InCohortFairSharing"),
    ],
)  # fmt: skip
def test_latest_eviction_reason_is_the_preempted_reason_or_else_the_evicted_one(fields, reason):
    """Kueue sets Evicted=True with reason Preempted and Preempted=True with the why
    (pkg/scheduler/preemption/preemption.go, `IssuePreemptions`), and Evicted alone with
    PodsReadyTimeout (pkg/controller/core/workload_controller.go, its PodsReady timeout)."""
    assert status.latest_eviction_reason(workload(**fields)) == reason
