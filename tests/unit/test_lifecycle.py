"""Workloads over virtual time: quota, gating, preemption, checkpoints, completion, deletion.

Everything goes through `workloads.services` and `admission.advance` with explicit datetimes and
is checked on what a user sees: Workload and Pod rows, `status.object_status`, Event rows.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from events.models import Event
from tests.support import NAMESPACE, at, deployment, job
from workloads import admission, runtime, services, status
from workloads.models import KubeObject, Pod, Workload

JOB_STARTUP = timedelta(minutes=1)
STEP = timedelta(minutes=1)


def apply(cluster, text, now):
    return services.apply(cluster, text, source="workloads.yaml", now=now, namespace=NAMESPACE)


def get(cluster, kind, name):
    return KubeObject.objects.get(cluster=cluster, kind=kind, namespace=NAMESPACE, name=name)


def object_status(cluster, kind, name):
    return status.object_status(get(cluster, kind, name))


def gpu_usage(cluster):
    return status.cluster_queue_status(cluster)["ClusterQueue/gpu-queue"]["usage"]["nvidia.com/gpu"]


def running_finetune_and_inference(cluster):
    """Inference (2 GPUs, high) and a fine-tune (2 pods x 2 GPUs, low) training since 12:01.

    At 12:15 the fine-tune has done 14 steps and saved a checkpoint at step 10.
    """
    apply(cluster, deployment(replicas=1), at())
    apply(cluster, job(pods=2, checkpoint_every=10), at())
    admission.advance(cluster, at(), at(minutes=15))


def test_a_deployment_scaled_past_quota_gates_the_extra_pod_and_its_workload_waits(gpu_queues):
    apply(gpu_queues, deployment(replicas=1), at())
    admission.advance(gpu_queues, at(), at(minutes=2))

    services.scale(get(gpu_queues, "Deployment", "inference"), 4, at(minutes=2))
    admission.advance(gpu_queues, at(minutes=2), at(minutes=5))

    pods = Pod.objects.filter(owner__name="inference")
    assert sorted(pods.values_list("phase", flat=True)) == [
        Pod.Phase.RUNNING,
        Pod.Phase.RUNNING,
        Pod.Phase.RUNNING,
        Pod.Phase.SCHEDULING_GATED,
    ]
    gated = pods.get(phase=Pod.Phase.SCHEDULING_GATED)
    assert gated.node is None
    waiting = gated.workload
    assert waiting.phase == Workload.Phase.PENDING
    assert waiting.pending_reason
    assert "nvidia.com/gpu" in waiting.pending_message
    assert gpu_usage(gpu_queues) == "6"


def test_a_higher_priority_pod_suspends_a_lower_priority_job_and_deletes_its_pods(gpu_queues):
    running_finetune_and_inference(gpu_queues)

    services.scale(get(gpu_queues, "Deployment", "inference"), 2, at(minutes=15))

    finetune = object_status(gpu_queues, "Job", "finetune")
    assert finetune["phase"] == "Suspended"
    assert finetune["preemptions"] == 1
    assert not Pod.objects.filter(owner__kind="Job").exists()
    preempted = Event.objects.get(kind="workload.preempted")
    assert preempted.object_key == "Job/llm/finetune"
    assert "Deployment/llm/inference" in preempted.message


def test_a_preempted_job_resumes_from_its_latest_checkpoint_and_counts_the_steps_lost(
    gpu_queues,
):
    running_finetune_and_inference(gpu_queues)
    inference = get(gpu_queues, "Deployment", "inference")
    services.scale(inference, 2, at(minutes=15))
    admission.advance(gpu_queues, at(minutes=15), at(minutes=16))

    services.scale(inference, 1, at(minutes=16))
    admission.advance(gpu_queues, at(minutes=16), at(minutes=18))

    finetune = object_status(gpu_queues, "Job", "finetune")
    assert finetune["phase"] == "Admitted"
    assert finetune["resumedFromStep"] == 10
    (row,) = Workload.objects.filter(owner__kind="Job")
    assert row.steps_lost == 4  # steps 11-14 ran after the checkpoint at step 10
    assert Event.objects.get(kind="workload.resumed").data["step"] == 10


def test_a_job_with_total_steps_finishes_by_itself_and_frees_its_quota(gpu_queues):
    apply(gpu_queues, job("short", pods=3, total_steps=5, checkpoint_every=0), at())
    apply(gpu_queues, job("next", pods=2), at())
    assert Workload.objects.get(owner__name="next").phase == Workload.Phase.PENDING

    admission.advance(gpu_queues, at(), at(minutes=30))

    short = Workload.objects.get(owner__name="short")
    assert short.phase == Workload.Phase.FINISHED
    assert short.finished_at == at() + JOB_STARTUP + 5 * STEP
    assert object_status(gpu_queues, "Job", "short")["phase"] == "Finished"
    assert not Pod.objects.filter(owner__name="short", node__isnull=False).exists()
    assert Workload.objects.get(owner__name="next").phase == Workload.Phase.ADMITTED
    assert gpu_usage(gpu_queues) == "4"


def test_deleting_an_object_frees_its_quota_and_admits_the_next_pending_workload(gpu_queues):
    apply(gpu_queues, deployment(replicas=3), at())
    apply(gpu_queues, job(pods=2), at())
    assert Workload.objects.get(owner__kind="Job").phase == Workload.Phase.PENDING

    services.delete(get(gpu_queues, "Deployment", "inference"), at(minutes=1))

    assert not KubeObject.objects.filter(kind="Deployment").exists()
    assert not Workload.objects.filter(name__startswith="pod-inference").exists()
    assert not Pod.objects.filter(name__startswith="inference").exists()
    assert Workload.objects.get(owner__kind="Job").phase == Workload.Phase.ADMITTED
    assert gpu_usage(gpu_queues) == "4"
    assert Event.objects.filter(kind="object.deleted", object_key="Deployment/llm/inference")


def test_an_unqueued_deployment_runs_on_nodes_without_any_workload(gpu_queues):
    apply(gpu_queues, deployment("web", replicas=2, queue=None), at())

    admission.advance(gpu_queues, at(), at(minutes=2))

    assert not Workload.objects.exists()
    pods = Pod.objects.filter(owner__name="web")
    assert [(p.phase, p.node is not None) for p in pods] == [(Pod.Phase.RUNNING, True)] * 2
    assert object_status(gpu_queues, "Deployment", "web")["phase"] == "Unmanaged"
    assert gpu_usage(gpu_queues) == "0"


def test_scaling_an_unqueued_deployment_up_adds_pods(gpu_queues):
    apply(gpu_queues, deployment("web", replicas=1, queue=None), at())

    services.scale(get(gpu_queues, "Deployment", "web"), 3, at(minutes=1))

    assert Pod.objects.filter(owner__name="web").count() == 3
    assert not Workload.objects.exists()


def test_scaling_an_unqueued_deployment_down_deletes_pods(gpu_queues):
    apply(gpu_queues, deployment("web", replicas=3, queue=None), at())

    services.scale(get(gpu_queues, "Deployment", "web"), 1, at(minutes=1))

    assert Pod.objects.filter(owner__name="web").count() == 1


def test_an_admitted_pod_that_fits_no_node_stays_pending_and_unbound(gpu_queues):
    # Quota has room for 4 GPUs, but a g2-standard-24 node has only 2: Kueue admits,
    # kube-scheduler cannot place.
    apply(gpu_queues, deployment("big", replicas=1, gpus=4), at())

    admission.advance(gpu_queues, at(), at(minutes=10))

    (row,) = Workload.objects.all()
    assert row.phase == Workload.Phase.ADMITTED
    (pod,) = Pod.objects.filter(owner__name="big")
    assert (pod.phase, pod.node) == (Pod.Phase.PENDING, None)
    assert object_status(gpu_queues, "Deployment", "big")["running"] == 0


HELD_QUEUE = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: team-llm
  namespace: llm
spec:
  clusterQueue: gpu-queue
  stopPolicy: Hold
"""


def test_a_local_queue_on_hold_admits_nothing(gpu_queues):
    # Kueue: a LocalQueue whose stopPolicy is not None is inactive; nothing is admitted from it.
    apply(gpu_queues, HELD_QUEUE, at())

    apply(gpu_queues, job(pods=1), at())

    held = Workload.objects.get()
    assert held.phase == Workload.Phase.PENDING
    assert held.pending_reason == "LocalQueueStopped"


def _stop_all_running(cluster, now):
    """Every admitted workload evicted at once, then stopped in one round; its statements."""
    Workload.objects.filter(phase=Workload.Phase.ADMITTED).update(
        evicting=True, eviction_reason="Preempted"
    )
    first_event = Event.objects.order_by("pk").last().pk
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        assert runtime.stop_evicted(cluster, now)
    events = Event.objects.filter(pk__gt=first_event).order_by("pk")
    return len(queries), [(e.object_key, e.kind, e.data.get("steps_lost")) for e in events]


def test_workloads_evicted_together_stop_in_as_many_statements_as_one_would(gpu_queues):
    """Evicted in the same round: each Job's pods are deleted, each Deployment's pod is
    recreated gated (no node, its scheduling as Kueue injects it), every workload is queued
    again with the training steps it lost, evicted then requeued in the event log, and the
    statements are as many for five workloads as for two."""
    apply(gpu_queues, deployment("a", replicas=1, gpus=1), at())
    apply(gpu_queues, job("j1", pods=1, gpus=1), at())
    admission.advance(gpu_queues, at(), at(minutes=15))
    two, _ = _stop_all_running(gpu_queues, at(minutes=15))

    apply(gpu_queues, deployment("b", replicas=2, gpus=1), at(minutes=15))
    apply(gpu_queues, job("j2", pods=1, gpus=1, checkpoint_every=0), at(minutes=15))
    admission.advance(gpu_queues, at(minutes=15), at(minutes=30))
    assert Workload.objects.filter(phase=Workload.Phase.ADMITTED).count() == 5
    five, events = _stop_all_running(gpu_queues, at(minutes=30))

    assert five == two
    assert not Pod.objects.filter(owner__kind="Job").exists()
    gated = Pod.objects.filter(owner__kind="Deployment")
    assert [(p.phase, p.node, p.scheduling["requests"]["nvidia.com/gpu"]) for p in gated] == [
        (Pod.Phase.SCHEDULING_GATED, None, 1000)  # milli-GPUs
    ] * 3
    rows = Workload.objects.all()  # the order they were stopped in
    assert {(w.phase, w.admission, w.evicting) for w in rows} == {
        (Workload.Phase.PENDING, None, False)
    }
    # j1 lost 4 steps at 12:15 (step 14, checkpoint at 10), resumed from step 10 at 12:16
    # and lost 4 again at 12:30 (step 24, checkpoint at 20); j2 never saves a checkpoint.
    assert {w.owner.name: w.steps_lost for w in rows if w.owner.kind == "Job"} == {
        "j1": 4 + 4,
        "j2": 14,
    }
    keys = [f"{w.owner.kind}/{NAMESPACE}/{w.owner.name}" for w in rows]
    assert [(key, kind) for key, kind, _ in events] == [
        (key, kind) for key in keys for kind in ("workload.evicted", "workload.requeued")
    ]
