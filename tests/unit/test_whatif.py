"""What-if: would these manifests be admitted now, whom would they preempt, at what cost."""

from __future__ import annotations

import pytest

from tests.support import NAMESPACE, at, deployment, job, row_counts
from workloads import admission, checkpoints, runtime, services
from workloads.manifests import ManifestError
from workloads.models import Workload
from workloads.whatif import whatif


def apply(cluster, text, now):
    return services.apply(cluster, text, source="workloads.yaml", now=now, namespace=NAMESPACE)


def ask(cluster, text, now):
    return whatif(cluster, text, "whatif.yaml", now, namespace=NAMESPACE)


def outcomes(report, owner):
    return [w for w in report["workloads"] if w["workload"]["owner"] == owner]


def stored_state():
    """Every row count, and what each workload is doing: a what-if must change neither."""
    phases = list(Workload.objects.values_list("name", "phase", "evicting", "pending_reason"))
    return row_counts(), phases


@pytest.fixture
def training(gpu_queues):
    """Inference (1 pod, 2 GPUs, high) and a fine-tune (2 pods x 2 GPUs, low) training since
    12:01; at 12:15 it is at step 14 with its latest checkpoint at step 10. Quota: 6/6 GPUs."""
    apply(gpu_queues, deployment(replicas=1), at())
    apply(gpu_queues, job(pods=2, checkpoint_every=10), at())
    admission.advance(gpu_queues, at(), at(minutes=15))
    return gpu_queues


def test_scaling_serving_would_preempt_the_fine_tune_and_lose_its_steps_since_checkpoint(
    training, django_capture_on_commit_callbacks
):
    finetune = Workload.objects.select_related("owner").get(owner__name="finetune")
    step = runtime.current_step(finetune, at(minutes=15))
    checkpoint = checkpoints.latest_step(finetune)
    assert (step, checkpoint) == (14, 10)
    before = stored_state()

    with django_capture_on_commit_callbacks(execute=False) as published:
        report = ask(training, deployment(replicas=2), at(minutes=15))

    assert report["applied"] == [{"object": "Deployment/llm/inference", "action": "configured"}]
    existing, added = outcomes(report, "inference")
    assert (existing["new"], existing["result"], existing["preempts"]) == (False, "admitted", [])
    assert added["new"] is True
    assert added["result"] == "admitted_after_preemption"
    assert added["cluster_queue"] == "gpu-queue"
    assert added["pod_sets"][0]["flavors"]["nvidia.com/gpu"] == "l4"
    assert len(added["nodes"]) == 1
    (victim,) = added["preempts"]
    assert {k: victim[k] for k in ("namespace", "name", "kind", "owner", "priority")} == {
        "namespace": "llm",
        "name": finetune.name,
        "kind": "Job",
        "owner": "finetune",
        "priority": 10,
    }
    assert victim["reason"] == "InClusterQueue"
    assert victim["steps_lost"] == step - checkpoint
    assert victim["resumes_from_step"] == checkpoint
    assert stored_state() == before
    assert published == []


def test_a_second_fine_tune_of_the_same_priority_waits_and_preempts_nobody(training):
    before = stored_state()

    report = ask(training, job("finetune-2", pods=1), at(minutes=15))

    (outcome,) = outcomes(report, "finetune-2")
    assert outcome["result"] == "pending"
    assert outcome["preempts"] == []
    assert outcome["pending"]["reason"] == "WaitingForQuota"
    assert "nvidia.com/gpu" in outcome["pending"]["message"]
    assert (outcome["pod_sets"], outcome["nodes"]) == ([], [])
    assert stored_state() == before


def test_a_job_that_fits_is_admitted_with_its_flavors_and_nodes(gpu_queues):
    before = stored_state()

    report = ask(gpu_queues, job(pods=2), at())

    (outcome,) = outcomes(report, "finetune")
    assert outcome["result"] == "admitted"
    assert outcome["phase"] == "Admitted"
    assert outcome["pod_sets"] == [
        {
            "name": "main",
            "count": 2,
            "flavors": {"cpu": "l4", "memory": "l4", "nvidia.com/gpu": "l4"},
            "topology": None,
        }
    ]
    # One 2-GPU pod per g2-standard-24 node.
    assert len({n["node"] for n in outcome["nodes"]}) == 2
    assert {n["node_pool"] for n in outcome["nodes"]} == {"gpupool"}
    assert stored_state() == before


def test_an_invalid_manifest_raises_manifest_error_and_stores_nothing(gpu_queues):
    before = stored_state()

    with pytest.raises(ManifestError) as caught:
        ask(gpu_queues, job(pods=2).replace("parallelism: 2", "parallelism: two"), at())

    assert caught.value.path == "spec.parallelism"
    assert stored_state() == before  # not even the rejection event
