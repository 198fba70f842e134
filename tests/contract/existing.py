"""An existing cluster's apiserver, as a platform team has it before Accelplane: Kueue objects
applied with kubectl (one that does not parse), Kueue's Configuration, kubectl-submitted Jobs
and the Kueue Workloads of those and of a RayJob. Shared by the contract tests of reading such
a cluster (test_kube_existing.py, test_existing_cluster.py)."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from clusters.models import Cluster
from tests.contract.fake_kube import FakeKube
from workloads.kube import watch

PROJECT, REGION = "acme-ml", "us-central1"
IMPORT = {
    "import": True,
    "name": "ml-prod",
    "provider": "gke",
    "project": PROJECT,
    "location": REGION,
}
KUBECTL = "kubectl-client-side-apply"
KUEUE = "kueue.x-k8s.io/v1beta2"

FLAVOR = {
    "apiVersion": KUEUE,
    "kind": "ResourceFlavor",
    "metadata": {"name": "l4"},
    "spec": {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-l4"}},
}
GPU_QUEUE = {
    "apiVersion": KUEUE,
    "kind": "ClusterQueue",
    "metadata": {"name": "gpu-queue"},
    "spec": {
        "cohortName": "ml",
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "l4",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "48"},
                            {"name": "nvidia.com/gpu", "nominalQuota": "8"},
                        ],
                    }
                ],
            }
        ],
    },
    "status": {"admittedWorkloads": 2},
}
BROKEN_QUEUE = {
    "apiVersion": KUEUE,
    "kind": "ClusterQueue",
    "metadata": {"name": "broken"},
    "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": "l4"}]},
}
LOCAL_QUEUES = [
    {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": "team-llm", "namespace": namespace},
        "spec": {"clusterQueue": "gpu-queue"},
    }
    for namespace in ("llm", "research")
]
KUEUE_CONFIG = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
    "data": {
        "controller_manager_config.yaml": yaml.safe_dump(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "waitForPodsReady": {"timeout": "5m"},
            }
        )
    },
}


def kubectl_job(name: str, namespace: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": "team-llm"},
        },
        "spec": {"parallelism": 2, "completions": 2, "template": pod_template(gpus)},
    }


def pod_template(gpus: int) -> dict[str, Any]:
    container = {
        "name": "trainer",
        "image": "trainer",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "2"}},
    }
    return {"spec": {"containers": [container], "restartPolicy": "Never"}}


def kueue_workload(
    name: str, namespace: str, owner: tuple[str, str, str], gpus: int, *, admitted: bool
) -> dict[str, Any]:
    """A Kueue Workload as Kueue's job integrations create it: owned by the job object."""
    api_version, kind, owner_name = owner
    status: dict[str, Any] = {"conditions": []}
    if admitted:
        status["conditions"] = [
            {"type": kind, "status": "True", "reason": kind, "message": "", "lastTransitionTime": t}
            for kind, t in (
                ("QuotaReserved", "2025-01-01T00:00:01+00:00"),
                ("Admitted", "2025-01-01T00:00:02+00:00"),
            )
        ]
        status["admission"] = {
            "clusterQueue": "gpu-queue",
            "podSetAssignments": [
                {"name": "main", "flavors": {"nvidia.com/gpu": "l4", "cpu": "l4"}, "count": 2}
            ],
        }
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": "2025-01-01T00:00:00+00:00",
            "ownerReferences": [
                {"apiVersion": api_version, "kind": kind, "name": owner_name, "controller": True}
            ],
        },
        "spec": {
            "queueName": "team-llm",
            "priority": 100,
            "podSets": [{"name": "main", "count": 2, "template": pod_template(gpus)}],
        },
        "status": status,
    }


FINETUNE = kueue_workload(
    "job-finetune-1a2b3", "llm", ("batch/v1", "Job", "finetune"), 1, admitted=True
)
RAY = kueue_workload(
    "rayjob-sweep-4c5d6", "llm", ("ray.io/v1", "RayJob", "sweep"), 2, admitted=True
)
RAY["spec"]["priorityClassRef"] = {
    "group": "kueue.x-k8s.io",
    "kind": "WorkloadPriorityClass",
    "name": "batch",
}
RESEARCH = kueue_workload(
    "job-probe-7e8f9", "research", ("batch/v1", "Job", "probe"), 1, admitted=False
)


def fill(fake_kube: FakeKube, version: str = "v1beta2") -> None:
    """Everything above on the apiserver, as served at kueue.x-k8s.io/`version` (v1beta1:
    a ClusterQueue's cohort is `cohort`, a Workload's priority class `priorityClassName`)."""
    for obj in (FLAVOR, GPU_QUEUE, BROKEN_QUEUE, *LOCAL_QUEUES, KUEUE_CONFIG):
        fake_kube.put(in_version(obj, version), manager=KUBECTL)
    for obj in (kubectl_job("finetune", "llm", 1), kubectl_job("probe", "research", 1)):
        fake_kube.put(obj, manager=KUBECTL)
    for obj in (FINETUNE, RAY, RESEARCH):
        fake_kube.put(in_version(obj, version))


def in_version(obj: dict[str, Any], version: str) -> dict[str, Any]:
    if not obj["apiVersion"].startswith("kueue.x-k8s.io/"):
        return obj
    converted = copy.deepcopy(obj)
    converted["apiVersion"] = f"kueue.x-k8s.io/{version}"
    spec = converted.get("spec") or {}
    if version == "v1beta1" and "cohortName" in spec:
        spec["cohort"] = spec.pop("cohortName")
    if version == "v1beta1" and "priorityClassRef" in spec:
        spec["priorityClassName"] = spec.pop("priorityClassRef")["name"]
        spec["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
    return converted


def read(cluster: Cluster, api, *watched: watch.Watched) -> list[watch.Session]:
    return [
        watch.watch_resource(cluster, api, w, timeout_seconds=1)
        for w in watched or watch.WATCHED.values()
        if w is not watch.NODES and w is not watch.PODS
    ]


def kueue_only(kind: str) -> watch.Watched:
    (found,) = (w for w in watch.QUEUE_OBJECTS if w.resource.startswith(kind))
    return found
