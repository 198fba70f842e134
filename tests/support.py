"""Manifests, a test clock and table counts for tests that go through the services."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import yaml
from django.apps import apps

from events.models import Event
from events.services import number_events
from workloads import services
from workloads.models import (
    Checkpoint,
    KubeObject,
    Pod,
    Workload,
    WorkloadChange,
    WorkloadChangeLog,
)

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
NAMESPACE = "llm"

# A WorkloadPriorityClass "urgent" (1000): a new cluster-scoped object, e.g. to head a
# multi-document request.
URGENT_CLASS = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: urgent
value: 1000
"""

# Kueue objects of the mixed training + inference workflow: 6 L4 GPUs shared by a
# high-priority Deployment and a low-priority Job.
GPU_QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: l4
spec:
  nodeLabels:
    cloud.google.com/gke-accelerator: nvidia-l4
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: gpu-queue
spec:
  namespaceSelector: {}
  preemption:
    withinClusterQueue: LowerPriority
  resourceGroups:
    - coveredResources: ["cpu", "memory", "nvidia.com/gpu"]
      flavors:
        - name: l4
          resources:
            - name: cpu
              nominalQuota: 72
            - name: memory
              nominalQuota: 288Gi
            - name: nvidia.com/gpu
              nominalQuota: 6
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: team-llm
  namespace: llm
spec:
  clusterQueue: gpu-queue
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: low
value: 10
description: Fine-tuning; preemptible by serving.
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: high
value: 100
description: Online inference.
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: batch
value: 5
"""


def _containers(name, gpus):
    requests = {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": str(gpus)}
    return [
        {
            "name": name,
            "image": f"ghcr.io/example/{name}:1.0",
            "resources": {"requests": requests, "limits": {"nvidia.com/gpu": str(gpus)}},
        }
    ]


def _gpu_pod(container, gpus, priority_class):
    return {
        "priorityClassName": priority_class,
        "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": _containers(container, gpus),
    }


def deployment(
    name="inference", *, replicas=1, gpus=2, priority_class="high", queue="team-llm", startup="30s"
):
    """A Deployment manifest (YAML); each replica asks for `gpus` L4 GPUs."""
    labels = {"app": name}
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "annotations": {"sim.accelplane.dev/startup": startup}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": _gpu_pod("server", gpus, priority_class),
            },
        },
    }
    return yaml.safe_dump(body, sort_keys=False)


def job(
    name="finetune",
    *,
    pods=2,
    gpus=2,
    priority_class="low",
    total_steps=None,
    step_time="60s",
    checkpoint_every=10,
    startup="60s",
):
    """An Indexed Job (YAML) of `pods` pods with `gpus` L4 GPUs each, training in the simulator."""
    annotations = {
        "sim.accelplane.dev/startup": startup,
        "sim.accelplane.dev/step-time": step_time,
        "sim.accelplane.dev/checkpoint-every": str(checkpoint_every),
    }
    if total_steps is not None:
        annotations["sim.accelplane.dev/total-steps"] = str(total_steps)
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {"kueue.x-k8s.io/queue-name": "team-llm"},
            "annotations": annotations,
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "OnFailure", **_gpu_pod("trainer", gpus, priority_class)}
            },
        },
    }
    return yaml.safe_dump(body, sort_keys=False)


def at(seconds=0, minutes=0):
    """A point on the test clock, `T0` plus an offset."""
    return T0 + timedelta(seconds=seconds, minutes=minutes)


def submit(cluster, name: str, gpus: int, queue: str = "team-llm") -> Workload:
    """A one-pod Job of `gpus` GPUs in `NAMESPACE`'s LocalQueue `queue`, queued without an
    admission run; its workload."""
    services.apply(
        cluster,
        job(name, pods=1, gpus=gpus).replace("team-llm", queue),
        source=f"{name}.yaml",
        now=at(),
        namespace=NAMESPACE,
        admit=services.Admit.SKIP,
    )
    return Workload.objects.get(cluster=cluster, owner__name=name)


def row_counts():
    """Rows in every table, by model label: what a request that failed must leave unchanged.
    The admission cache's bookkeeping aside: the next admission consumes what it notes."""
    return {
        model._meta.label: model._default_manager.count()
        for model in apps.get_models()
        if model not in (WorkloadChange, WorkloadChangeLog)
    }


def tpu_jobset(name="js", shape="2x2x2", replicas=2, parallelism=2, chips=4, node_selector=True):
    """A JobSet of TPU7x Jobs asking the GKE slice controller for `shape` slices."""
    selector = "nodeSelector: {cloud.google.com/gke-tpu-accelerator: tpu7x}"
    if not node_selector:
        selector = ""
    return f"""\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {{name: {name}, namespace: {NAMESPACE}, labels: {{kueue.x-k8s.io/queue-name: lq}}}}
spec:
  replicatedJobs:
    - name: job-jax
      replicas: {replicas}
      template:
        spec:
          parallelism: {parallelism}
          template:
            metadata:
              annotations: {{cloud.google.com/gke-tpu-slice-topology: "{shape}"}}
            spec:
              {selector}
              containers:
                - name: c
                  resources: {{limits: {{google.com/tpu: "{chips}"}}}}
"""


def service_account_key() -> dict:
    """A service account key file's JSON, as IAM gives it, with a real RSA key (the google
    clients sign a token request with it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return {
        "type": "service_account",
        "project_id": "acme-ml",
        "private_key_id": "abc123",
        "private_key": pem,
        "client_email": "deployer@acme-ml.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token",
    }


Row = TypeVar("Row")


def copy_finished_job(owner: KubeObject, numbers: range) -> None:
    """History in bulk: a copy of a finished Job (its owner, workload, pods, checkpoints and
    events) for each of `numbers`, named after it."""
    workload = owner.workloads.get()
    pods = list(Pod.objects.filter(workload=workload))
    checkpoints = list(Checkpoint.objects.filter(owner=owner))
    events = list(Event.objects.filter(cluster=owner.cluster.name, object_key=owner.key))
    owners = KubeObject.objects.bulk_create(
        [_copy(owner, name=f"{owner.name}-{i}") for i in numbers]
    )
    workloads = Workload.objects.bulk_create(
        [
            _copy(workload, name=f"{workload.name}-{i}", owner_id=o.pk)
            for i, o in zip(numbers, owners, strict=True)
        ]
    )
    Pod.objects.bulk_create(
        _copy(pod, name=f"{pod.name}-{i}", owner_id=o.pk, workload_id=w.pk)
        for i, o, w in zip(numbers, owners, workloads, strict=True)
        for pod in pods
    )
    Checkpoint.objects.bulk_create(
        _copy(c, owner_id=o.pk, workload_id=w.pk)
        for o, w in zip(owners, workloads, strict=True)
        for c in checkpoints
    )
    Event.objects.bulk_create(
        _copy(e, seq=None, object_key=o.key, workload_name=w.name if e.workload_name else "")
        for o, w in zip(owners, workloads, strict=True)
        for e in events
    )
    number_events()  # as their commits would have


def _copy(row: Row, **changes: object) -> Row:
    """An unsaved copy of `row` with `changes`."""
    new = copy.copy(row)
    new.pk = None  # type: ignore[attr-defined]
    new._state = copy.copy(row._state)  # type: ignore[attr-defined]
    new._state.adding = True  # type: ignore[attr-defined]
    for name, value in changes.items():
        setattr(new, name, value)
    return new
