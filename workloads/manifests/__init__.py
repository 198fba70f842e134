"""What users `kubectl apply`: parsed, validated and normalised before anything is stored."""

from __future__ import annotations

from workloads.manifests.clusterqueues import ClusterQueueSpec, CohortSpec
from workloads.manifests.documents import (
    CLUSTER_SCOPED,
    QUEUE_KINDS,
    SUPPORTED_VERSIONS,
    WORKLOAD_KINDS,
    Document,
    load_documents,
)
from workloads.manifests.errors import ManifestError
from workloads.manifests.kueue import KUEUE_STORAGE_VERSION, queue_spec, render
from workloads.manifests.podsets import PodSetSpec
from workloads.manifests.workloads import (
    WorkloadShape,
    check_pods_per_request,
    scale,
    workload_shape,
)

__all__ = [
    "CLUSTER_SCOPED",
    "KUEUE_STORAGE_VERSION",
    "QUEUE_KINDS",
    "SUPPORTED_VERSIONS",
    "WORKLOAD_KINDS",
    "ClusterQueueSpec",
    "CohortSpec",
    "Document",
    "ManifestError",
    "PodSetSpec",
    "WorkloadShape",
    "check_pods_per_request",
    "load_documents",
    "queue_spec",
    "render",
    "scale",
    "workload_shape",
]
