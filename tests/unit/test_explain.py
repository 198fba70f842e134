"""Explain why a workload is pending, was preempted or is admitted, with Kueue's arithmetic."""

from __future__ import annotations

from tests.shared import GPU_SEED as SEED
from tests.shared import GPU_SEED_FILES as SEED_FILES
from tests.shared import GPU_SEED_PLACEHOLDERS as SEED_PLACEHOLDERS
from tests.shared import requires_shared
from tests.support import NAMESPACE, at, deployment, job
from workloads import admission, services
from workloads.explain import explain
from workloads.models import KubeObject, LocalQueue, Workload

SEED_SIMULATION = {
    "Deployment/llm/tgi-gemma-deployment": {"startup": "2m"},
    "Job/llm/finetune-gemma-l4": {"startup": "1m", "stepTime": "60s", "checkpointEvery": 10},
}


COHORT_QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohortName: pool
  resourceGroups:
    - coveredResources: ["cpu", "memory", "nvidia.com/gpu"]
      flavors:
        - name: l4
          resources:
            - {name: cpu, nominalQuota: 24}
            - {name: memory, nominalQuota: 96Gi}
            - {name: nvidia.com/gpu, nominalQuota: 2}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-b}
spec:
  cohortName: pool
  resourceGroups:
    - coveredResources: ["cpu", "memory", "nvidia.com/gpu"]
      flavors:
        - name: l4
          resources:
            - {name: cpu, nominalQuota: 24}
            - {name: memory, nominalQuota: 96Gi}
            - {name: nvidia.com/gpu, nominalQuota: 4, lendingLimit: 2}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq-a, namespace: llm}
spec: {clusterQueue: team-a}
"""


def apply(cluster, text, now, source="workloads.yaml"):
    return services.apply(
        cluster,
        text,
        source=source,
        now=now,
        namespace=NAMESPACE,
        substitutions=SEED_PLACEHOLDERS,
        simulation=SEED_SIMULATION,
    )


def get(cluster, kind, name):
    return KubeObject.objects.get(cluster=cluster, kind=kind, namespace=NAMESPACE, name=name)


def workload_of(name):
    return Workload.objects.select_related("owner", "cluster").get(owner__name=name)


def quota_row(report, resource, flavor):
    (row,) = [q for q in report["quota"] if (q["resource"], q["flavor"]) == (resource, flavor)]
    return row


def preempt_finetune_with_inference(cluster, inference="inference"):
    """The fine-tune (2 pods x 2 GPUs) trains from 12:01; at 12:15 (step 14, checkpoint at
    step 10) the inference Deployment scales to 2 pods and takes its GPUs."""
    admission.advance(cluster, at(), at(minutes=15))
    services.scale(get(cluster, "Deployment", inference), 2, at(minutes=15))


def test_a_preempted_fine_tune_is_blocked_by_the_inference_pods_holding_the_gpus(gpu_queues):
    apply(gpu_queues, deployment(replicas=1), at())
    apply(gpu_queues, job(pods=2, checkpoint_every=10), at())
    preempt_finetune_with_inference(gpu_queues)

    report = explain(workload_of("finetune"), at(minutes=16))

    assert report["status"] == "pending"
    assert report["queue"] == {"local_queue": "llm/team-llm", "cluster_queue": "gpu-queue"}
    assert report["pending"]["reason"] == "WaitingForQuota"
    gpu = quota_row(report, "nvidia.com/gpu", "l4")
    assert {k: gpu[k] for k in ("requested", "nominal", "used", "available", "borrowable")} == {
        "requested": "4",
        "nominal": "6",
        "used": "4",
        "available": "2",
        "borrowable": "0",
    }
    assert gpu["fits"] is False
    assert gpu["arithmetic"] == "requested 4 > available 2 (nominal 6, used 4, borrowable 0)"
    assert gpu["lendable"] == "0"  # no cohort
    assert gpu["cohorts"] == []
    assert quota_row(report, "memory", "l4")["fits"] is True
    assert [(b["kind"], b["owner"], b["priority"]) for b in report["blockers"]] == [
        ("Deployment", "inference", 100),
        ("Deployment", "inference", 100),
    ]
    assert all(
        b["holds"] == [{"flavor": "l4", "resource": "nvidia.com/gpu", "amount": "2"}]
        and not b["would_be_preempted"]
        for b in report["blockers"]
    )
    # Serving outranks it: preemption finds no candidate.
    assert report["flavors"]["mode"] == "NoCandidates"
    assert report["flavors"]["would_preempt"] == []
    preemption = report["preemption"]
    assert preemption["by"]["object"] == "Deployment/llm/inference"
    assert preemption["by"]["priority"] == 100
    assert (preemption["at"], preemption["reason"]) == ("2025-01-01T12:15:00Z", "InClusterQueue")
    assert preemption["steps_lost"] == 4  # steps 11-14 ran after the checkpoint at step 10
    assert {c["type"]: c["status"] for c in report["conditions"]}["Preempted"] == "False"
    assert report["position"]["cluster_queue"] == {
        "name": "gpu-queue",
        "position": 1,
        "pending": 1,
    }
    assert "held by 2 workload(s)" in report["summary"]


@requires_shared
def test_the_seed_fine_tune_names_the_tgi_pods_that_preempted_it(cluster):
    for name in SEED_FILES:
        apply(cluster, (SEED / name).read_text(), at(), source=name)
    apply(cluster, (SEED / "tgi-gemma-2-9b-it-hp.yaml").read_text(), at())
    apply(cluster, (SEED / "fine-tune-l4.yaml").read_text(), at())
    preempt_finetune_with_inference(cluster, "tgi-gemma-deployment")

    report = explain(workload_of("finetune-gemma-l4"), at(minutes=15))

    gpu = quota_row(report, "nvidia.com/gpu", "default-flavor")
    assert (gpu["requested"], gpu["nominal"], gpu["used"], gpu["available"]) == ("4", "6", "4", "2")
    assert [(b["object"], b["priority"]) for b in report["blockers"]] == [
        ("Deployment/llm/tgi-gemma-deployment", 30)
    ] * 2
    assert report["preemption"]["by"]["object"] == "Deployment/llm/tgi-gemma-deployment"
    assert report["preemption"]["steps_lost"] == 4


@requires_shared
def test_an_admitted_tgi_pod_reports_its_assignment_and_the_quota_it_holds(cluster):
    for name in SEED_FILES:
        apply(cluster, (SEED / name).read_text(), at(), source=name)
    apply(cluster, (SEED / "tgi-gemma-2-9b-it-hp.yaml").read_text(), at())

    report = explain(workload_of("tgi-gemma-deployment"), at(minutes=1))

    assert report["status"] == "admitted"
    assert report["assignment"]["pod_sets"][0]["flavors"]["nvidia.com/gpu"] == "default-flavor"
    gpu = quota_row(report, "nvidia.com/gpu", "default-flavor")
    assert (gpu["requested"], gpu["used"], gpu["available"]) == ("2", "2", "4")
    assert gpu["arithmetic"] == "holds 2 of used 2 (nominal 6, available 4)"
    assert report["blockers"] == []
    assert report["summary"] == "Admitted in ClusterQueue cluster-queue with flavor default-flavor"


def test_a_running_fine_tune_reports_the_steps_a_preemption_would_cost(gpu_queues):
    apply(gpu_queues, job(pods=2, checkpoint_every=10), at())
    admission.advance(gpu_queues, at(), at(minutes=15))

    report = explain(workload_of("finetune"), at(minutes=15))

    assert report["training"] == {"current_step": 14, "checkpoint_step": 10, "steps_at_risk": 4}
    assert report["preemption"] is None


def test_pending_workloads_are_placed_by_priority_then_queue_time(gpu_queues):
    apply(gpu_queues, deployment(replicas=3), at())  # all 6 GPUs
    apply(gpu_queues, job("first", pods=1), at(seconds=1))
    apply(gpu_queues, job("second", pods=1), at(seconds=2))
    apply(gpu_queues, job("urgent", pods=1, priority_class="high"), at(seconds=3))

    positions = {
        name: explain(workload_of(name), at(seconds=4))["position"]
        for name in ("first", "second", "urgent")
    }

    assert {name: p["local_queue"]["position"] for name, p in positions.items()} == {
        "urgent": 1,
        "first": 2,
        "second": 3,
    }
    assert positions["second"]["cluster_queue"] == {
        "name": "gpu-queue",
        "position": 3,
        "pending": 3,
    }


def test_a_workload_admitted_after_it_was_read_has_no_place_in_the_queue(gpu_queues):
    """The workload page reads the row, then the queue: a run may admit it in between (the
    page answered 500 when it looked for the row in a queue it had left)."""
    apply(gpu_queues, deployment(replicas=3), at())  # all 6 GPUs
    apply(gpu_queues, job("first", pods=1), at(seconds=1))
    read = workload_of("first")
    Workload.objects.filter(pk=read.pk).update(phase=Workload.Phase.ADMITTED)

    report = explain(read, at(seconds=2))

    assert report["position"] is None
    assert "no longer queued" in report["summary"]


def test_a_workload_whose_local_queue_is_gone_says_so(gpu_queues):
    # Submitted, then its LocalQueue deleted before any scheduling cycle saw it.
    services.apply(
        gpu_queues,
        job(pods=1),
        source="job.yaml",
        now=at(),
        namespace=NAMESPACE,
        admit=services.Admit.SKIP,
    )
    LocalQueue.objects.filter(cluster=gpu_queues, name="team-llm").delete()
    admission.settle(gpu_queues, at(seconds=1))

    report = explain(workload_of("finetune"), at(seconds=1))

    assert report["status"] == "pending"
    assert report["pending"]["reason"] == "Misconfigured"
    assert report["queue"]["cluster_queue"] is None
    assert (report["quota"], report["blockers"], report["position"]) == ([], [], None)
    assert report["summary"] == "LocalQueue team-llm does not exist in namespace llm"


def test_a_request_beyond_what_the_cohort_can_lend_shows_the_borrowing_arithmetic(gpu_queues):
    apply(gpu_queues, COHORT_QUEUES, at())
    apply(gpu_queues, job(pods=3).replace("team-llm", "lq-a"), at())  # 6 GPUs

    report = explain(workload_of("finetune"), at())

    # team-a: 2 of its own + the 2 team-b lends (lendingLimit) of its 4: at most 4, never 6.
    gpu = quota_row(report, "nvidia.com/gpu", "l4")
    assert {k: gpu[k] for k in ("requested", "nominal", "used", "borrowable", "available")} == {
        "requested": "6",
        "nominal": "2",
        "used": "0",
        "borrowable": "2",
        "available": "4",
    }
    assert (gpu["lendable"], gpu["max_available"]) == ("2", "4")
    assert gpu["cohorts"] == [{"cohort": "pool", "quota": "4", "used": "0", "available": "4"}]
    assert report["flavors"]["reason"] == "ExceedsMaxQuota"
    assert report["pending"]["reason"] == "ExceedsMaxQuota"
    assert report["blockers"] == []
    assert report["summary"].startswith("ExceedsMaxQuota (position 1 of 1 in team-a): ")


FAIR_SHARING = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
fairSharing: {preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]}
"""


def test_with_fair_sharing_explain_shows_the_weighted_shares_up_the_cohort_tree(
    gpu_queues, client, django_user_model
):
    """Kueue's DominantResourceShare of the workload's ClusterQueue and each Cohort above it:
    team-a borrowing 2 GPUs from team-b has a positive share; without fair sharing, none."""
    apply(gpu_queues, COHORT_QUEUES, at())
    apply(gpu_queues, job("first", pods=2).replace("team-llm", "lq-a"), at())  # 4 of 2 + 2 lent
    apply(gpu_queues, job("second", pods=1).replace("team-llm", "lq-a"), at())
    assert explain(workload_of("second"), at())["fair_sharing"] is None

    apply(gpu_queues, FAIR_SHARING, at(), source="configuration.yaml")
    shares = explain(workload_of("second"), at())["fair_sharing"]

    assert [(s["kind"], s["name"], s["weight"]) for s in shares] == [
        ("ClusterQueue", "team-a", 1.0),
        ("Cohort", "pool", 1.0),
    ]
    assert shares[0]["share"] > 0
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    page = client.get(f"/workloads/{get(gpu_queues, 'Job', 'second').pk}/").content.decode()
    assert "Fair sharing" in page
    assert f'<td class="num">{shares[0]["share"]}</td>' in page
