"""Three Kueue rules as users meet them through `kubectl apply`: a workload may name a
LocalQueue that does not exist yet, the WorkloadPriorityClass `default` applies to workloads
without a priority-class label, and a ClusterQueue covering `pods` counts one per pod."""

from __future__ import annotations

from tests.support import NAMESPACE, at, job
from workloads import services, status
from workloads.explain import explain
from workloads.models import ClusterQueue, Workload

LATER_QUEUE = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: later, namespace: llm}
spec: {clusterQueue: gpu-queue}
"""

GHOST_QUEUE = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: haunted, namespace: llm}
spec: {clusterQueue: ghost}
"""

DEFAULT_CLASS = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: default}
value: 50
"""

PODS_QUEUE = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: pod-queue}
spec:
  resourceGroups:
    - coveredResources: ["cpu", "memory", "nvidia.com/gpu", "pods"]
      flavors:
        - name: l4
          resources:
            - {name: cpu, nominalQuota: 72}
            - {name: memory, nominalQuota: 288Gi}
            - {name: nvidia.com/gpu, nominalQuota: 6}
            - {name: pods, nominalQuota: 3}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: pod-team, namespace: llm}
spec: {clusterQueue: pod-queue}
"""


def apply(cluster, text, now=None):
    return services.apply(
        cluster, text, source="request.yaml", now=now or at(), namespace=NAMESPACE
    )


def job_in(queue, name="finetune", **kwargs):
    return job(name, **kwargs).replace("queue-name: team-llm", f"queue-name: {queue}")


def workload_of(name):
    return Workload.objects.select_related("owner", "cluster").get(owner__name=name)


def quota_reserved(row):
    return next(c for c in row.conditions if c["type"] == "QuotaReserved")


# -- a LocalQueue that does not exist (yet) ---------------------------------------------------


def test_a_workload_naming_a_missing_local_queue_is_accepted_and_waits_misconfigured(gpu_queues):
    """Kueue accepts it (the webhook checks only the label's format) and marks it
    QuotaReserved=False, Misconfigured, "LocalQueue later doesn't exist": workload_controller.go
    `getQueueBlocker`; TestReconcile "inadmissible workload due to missing LocalQueue
    (observability enabled)", integration "the queue doesn't exist"."""
    (applied,) = apply(gpu_queues, job_in("later"))

    assert applied.action == "created"
    row = workload_of("finetune")
    assert row.phase == Workload.Phase.PENDING
    assert quota_reserved(row) == {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Misconfigured",
        "message": "LocalQueue later doesn't exist",
    }
    report = explain(row, at(seconds=1))
    assert report["pending"]["reason"] == "Misconfigured"
    assert report["summary"] == "LocalQueue later does not exist in namespace llm"


def test_a_workload_is_admitted_once_its_local_queue_is_applied(gpu_queues):
    """Kueue queues it when the LocalQueue appears (queue manager `AddLocalQueue` adds the
    namespace's pending workloads of that name), and the scheduler admits it."""
    apply(gpu_queues, job_in("later"))

    apply(gpu_queues, LATER_QUEUE, now=at(seconds=5))

    row = workload_of("finetune")
    assert row.phase == Workload.Phase.ADMITTED
    assert row.cluster_queue_name == "gpu-queue"
    assert (row.pending_reason, row.pending_message) == ("", "")


def test_deleting_a_local_queue_keeps_admitted_workloads_and_leaves_pending_ones_waiting(
    gpu_queues,
):
    """Kueue puts no finalizer on LocalQueues: the admitted workload keeps its quota, the
    pending one becomes Misconfigured (`getQueueBlocker`) and waits for the queue again."""
    apply(gpu_queues, job("first", pods=2))  # 4 of 6 GPUs
    apply(gpu_queues, job("second", pods=2), now=at(seconds=1))  # waits for quota
    assert workload_of("second").phase == Workload.Phase.PENDING

    services.delete_queue_object(gpu_queues, "LocalQueue", "team-llm", NAMESPACE, at(seconds=2))
    services.end(workload_of("first").owner, at(seconds=3), failed=False)

    first, second = workload_of("first"), workload_of("second")
    assert first.phase == Workload.Phase.FINISHED
    assert second.phase == Workload.Phase.PENDING
    assert quota_reserved(second)["reason"] == "Misconfigured"
    assert quota_reserved(second)["message"] == "LocalQueue team-llm doesn't exist"

    apply(gpu_queues, LATER_QUEUE.replace("later", "team-llm"), now=at(seconds=4))

    assert workload_of("second").phase == Workload.Phase.ADMITTED


def test_a_local_queue_naming_a_missing_cluster_queue_leaves_its_workloads_misconfigured(
    gpu_queues,
):
    """`getQueueBlocker`: Misconfigured, "ClusterQueue ghost doesn't exist" (integration
    "the clusterqueue doesn't exist")."""
    apply(gpu_queues, GHOST_QUEUE)
    apply(gpu_queues, job_in("haunted"))

    row = workload_of("finetune")
    assert row.phase == Workload.Phase.PENDING
    assert (row.pending_reason, row.pending_message) == (
        "Misconfigured",
        "ClusterQueue ghost doesn't exist",
    )


# -- the WorkloadPriorityClass `default` ------------------------------------------------------


def test_the_default_workload_priority_class_applies_before_the_pods_priority_class(gpu_queues):
    """Gate WorkloadPriorityClassDefaulting (beta, on): the job webhook labels an object
    without `kueue.x-k8s.io/priority-class` with the WorkloadPriorityClass `default`
    (jobframework/defaults.go `ApplyDefaultWorkloadPriorityClass`; TestApplyDefault-
    WorkloadPriorityClass "feature gate enabled, no label, default WPC exists"), so it wins
    over the pods' PriorityClass `low` (10)."""
    apply(gpu_queues, DEFAULT_CLASS)
    apply(gpu_queues, job(priority_class="low"))

    row = workload_of("finetune")
    assert (row.priority, row.priority_class_name) == (50, "default")


def test_a_priority_class_label_overrides_the_default_workload_priority_class(gpu_queues):
    """TestApplyDefaultWorkloadPriorityClass "feature gate enabled, label already set"."""
    apply(gpu_queues, DEFAULT_CLASS)
    labelled = job().replace(
        "queue-name: team-llm", "queue-name: team-llm\n    kueue.x-k8s.io/priority-class: batch"
    )
    apply(gpu_queues, labelled)

    row = workload_of("finetune")
    assert (row.priority, row.priority_class_name) == (5, "batch")


def test_without_a_default_workload_priority_class_the_pods_priority_class_applies(gpu_queues):
    """TestApplyDefaultWorkloadPriorityClass "feature gate enabled, no label, default WPC does
    not exist": no label is set, the pods' PriorityClass `low` (10) decides."""
    apply(gpu_queues, job(priority_class="low"))

    row = workload_of("finetune")
    assert (row.priority, row.priority_class_name) == (10, "low")


# -- a ClusterQueue covering `pods` -----------------------------------------------------------


def test_a_cluster_queue_covering_pods_counts_one_per_admitted_pod(gpu_queues):
    """flavorassigner.go `assignFlavors` adds `pods: count` to each PodSet's requests when the
    ClusterQueue covers `pods` (TestAssignFlavors "num pods fit"); the ClusterQueue's usage
    shows them, and the status and usage pages with it."""
    apply(gpu_queues, PODS_QUEUE)
    apply(gpu_queues, job_in("pod-team", "first", pods=2, gpus=1))
    apply(gpu_queues, job_in("pod-team", "second", pods=2, gpus=1), now=at(seconds=1))

    assert workload_of("first").phase == Workload.Phase.ADMITTED
    # 2 pods held + 2 asked > 3 pods: it waits although 4 of 6 GPUs are free.
    assert workload_of("second").phase == Workload.Phase.PENDING
    fields = status.cluster_status(gpu_queues)["ClusterQueue/pod-queue"]
    assert fields["usage"]["pods"] == "2"
    usage = status.cluster_queue_usage(gpu_queues, ClusterQueue.objects.get(name="pod-queue"))
    (pods,) = [r for r in usage["resources"] if r["resource"] == "pods"]
    assert (pods["nominal"], pods["used"], pods["pending"]) == ("3", "2", "2")
