"""JobSet and LeaderWorkerSet exclusive placement: one domain of the topology key per group."""

from __future__ import annotations

import pytest

from clusters import services as cluster_services
from tests.support import NAMESPACE, T0, at
from workloads import admission, manifests, services
from workloads.manifests import ManifestError
from workloads.models import Pod

POOL = "cloud.google.com/gke-nodepool"


def gpu_jobset(jobs=3, annotation_on="jobset", key=POOL):
    jobset_annotations = f"{{alpha.jobset.sigs.k8s.io/exclusive-topology: {key}}}"
    template_annotations = jobset_annotations if annotation_on == "job" else "{}"
    if annotation_on != "jobset":
        jobset_annotations = "{}"
    return f"""\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: trainer
  namespace: {NAMESPACE}
  labels: {{kueue.x-k8s.io/queue-name: team-llm}}
  annotations: {jobset_annotations}
spec:
  replicatedJobs:
    - name: worker
      replicas: {jobs}
      template:
        metadata: {{annotations: {template_annotations}}}
        spec:
          parallelism: 1
          template:
            spec:
              priorityClassName: low
              tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
              containers:
                - name: c
                  resources: {{limits: {{nvidia.com/gpu: "2", cpu: "1", memory: 4Gi}}}}
"""


def shape(text):
    (doc,) = manifests.load_documents(text, source="t.yaml")
    return manifests.workload_shape(doc)


@pytest.mark.parametrize("annotation_on", ["jobset", "job"])
def test_the_annotation_on_the_jobset_or_a_replicated_job_makes_each_job_a_group(annotation_on):
    (pod_set,) = shape(gpu_jobset(annotation_on=annotation_on)).pod_sets
    assert (pod_set.exclusive_topology, pod_set.exclusive_group_pods) == (POOL, 1)


def test_a_slice_shaped_job_on_the_slice_key_is_exclusive_by_its_slice():
    from tests.support import tpu_jobset

    text = tpu_jobset().replace(
        "labels: {kueue.x-k8s.io/queue-name: lq}",
        "labels: {kueue.x-k8s.io/queue-name: lq}, "
        "annotations: {alpha.jobset.sigs.k8s.io/exclusive-topology: "
        "cloud.google.com/gke-tpu-slice}",
    )
    (pod_set,) = shape(text).pod_sets
    assert pod_set.exclusive_topology is None


def test_an_invalid_topology_key_is_refused_with_its_field():
    with pytest.raises(ManifestError) as refused:
        shape(gpu_jobset(key="'not a key!'"))
    assert refused.value.path == "metadata.annotations[alpha.jobset.sigs.k8s.io/exclusive-topology]"


@pytest.mark.parametrize("queued", [True, False])
def test_each_job_of_an_exclusive_jobset_gets_a_node_pool_of_its_own(gpu_queues, queued):
    cluster_services.provision_now(
        gpu_queues, name="spare", machine_type="g2-standard-24", node_count=1, at=T0
    )
    text = gpu_jobset(jobs=3)
    if not queued:  # straight to the scheduler, as without Kueue
        text = text.replace("labels: {kueue.x-k8s.io/queue-name: team-llm}", "labels: {}")
    services.apply(gpu_queues, text, source="t.yaml", now=T0)
    admission.advance(gpu_queues, T0, at(minutes=5))
    pools = {}
    for pod in Pod.objects.filter(owner__name="trainer").select_related("node__node_pool"):
        pools[pod.name] = pod.node.node_pool.name if pod.node else None
    # Quota admits all three Jobs (6 GPUs) and the pools have 8, but two pools hold two Jobs.
    bound = sorted(p for p in pools.values() if p)
    assert bound == ["gpupool", "spare"]
    assert list(pools.values()).count(None) == 1
