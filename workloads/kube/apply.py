"""Server-side apply, scale and delete of manifests on a real cluster's REST paths."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from workloads.kube.client import KubeError

FIELD_MANAGER = "accelplane"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"

# (API group, kind) -> (plural, namespaced). The version comes from the manifest.
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("", "Namespace"): ("namespaces", False),
    ("", "Service"): ("services", True),
    ("", "ConfigMap"): ("configmaps", True),
    ("", "Secret"): ("secrets", True),
    ("", "ServiceAccount"): ("serviceaccounts", True),
    ("", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("", "Pod"): ("pods", True),
    ("apps", "Deployment"): ("deployments", True),
    ("apps", "StatefulSet"): ("statefulsets", True),
    ("batch", "Job"): ("jobs", True),
    ("jobset.x-k8s.io", "JobSet"): ("jobsets", True),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): ("leaderworkersets", True),
    ("scheduling.k8s.io", "PriorityClass"): ("priorityclasses", False),
    ("kueue.x-k8s.io", "ResourceFlavor"): ("resourceflavors", False),
    ("kueue.x-k8s.io", "Cohort"): ("cohorts", False),
    ("kueue.x-k8s.io", "ClusterQueue"): ("clusterqueues", False),
    ("kueue.x-k8s.io", "LocalQueue"): ("localqueues", True),
    ("kueue.x-k8s.io", "WorkloadPriorityClass"): ("workloadpriorityclasses", False),
    ("kueue.x-k8s.io", "Topology"): ("topologies", False),
    ("kueue.x-k8s.io", "AdmissionCheck"): ("admissionchecks", False),
    ("kueue.x-k8s.io", "Workload"): ("workloads", True),
}
# kubectl scale: Deployments through their scale subresource; a LeaderWorkerSet's
# spec.replicas (its number of groups) is patched directly.
SCALE_TARGETS = {
    "Deployment": ("apps/v1", "scale"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/v1", ""),
}


@dataclass(frozen=True, slots=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str
    """Empty for cluster-scoped kinds."""
    name: str
    plural: str

    @classmethod
    def of(cls, api_version: str, kind: str, namespace: str, name: str) -> ObjectRef:
        group = api_version.rpartition("/")[0]
        resource = RESOURCES.get((group, kind))
        if resource is None:
            raise KubeError(f"{api_version} {kind} is not a kind Accelplane applies")
        plural, namespaced = resource
        return cls(api_version, kind, (namespace or "default") if namespaced else "", name, plural)

    @classmethod
    def of_manifest(cls, manifest: Mapping[str, Any], namespace: str = "") -> ObjectRef:
        """`namespace` is kubectl's -n: used when the manifest names none."""
        metadata = manifest.get("metadata") or {}
        return cls.of(
            manifest.get("apiVersion", ""),
            manifest.get("kind", ""),
            metadata.get("namespace") or namespace,
            metadata.get("name", ""),
        )

    @property
    def key(self) -> str:
        return "/".join(p for p in (self.kind, self.namespace, self.name) if p)

    def path(self, subresource: str = "") -> str:
        # The core group lives under /api, every named group under /apis.
        root = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        scope = f"/namespaces/{self.namespace}" if self.namespace else ""
        tail = f"/{subresource}" if subresource else ""
        return f"{root}{scope}/{self.plural}/{self.name}{tail}"


def apply(
    api: client.ApiClient, manifest: Mapping[str, Any], namespace: str = ""
) -> dict[str, Any]:
    """`kubectl apply --server-side --force-conflicts -n namespace`: the manifest as submitted."""
    ref = ObjectRef.of_manifest(manifest, namespace)
    query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
    return request(api, "PATCH", ref, "apply", query=query, body=manifest, content_type=APPLY_PATCH)


def scale(api: client.ApiClient, kind: str, namespace: str, name: str, replicas: int) -> None:
    if kind not in SCALE_TARGETS:
        raise KubeError(f"{kind} cannot be scaled; only {' and '.join(SCALE_TARGETS)} can")
    api_version, subresource = SCALE_TARGETS[kind]
    ref = ObjectRef.of(api_version, kind, namespace, name)
    patch = {"spec": {"replicas": replicas}}
    request(api, "PATCH", ref, "scale", subresource=subresource, body=patch, content_type=MERGE)


def delete(api: client.ApiClient, ref: ObjectRef) -> None:
    """Deleted with its dependents (a Job's own default would orphan its pods); gone is fine."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    try:
        request(api, "DELETE", ref, "delete", body=body)
    except KubeError as error:
        if error.status != 404:
            raise


def request(
    api: client.ApiClient,
    method: str,
    ref: ObjectRef,
    verb: str,
    *,
    subresource: str = "",
    query: Sequence[tuple[str, str]] = (),
    body: Mapping[str, Any] | None = None,
    content_type: str = "",
) -> dict[str, Any]:
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    serialized = api.param_serialize(
        method=method,
        resource_path=ref.path(subresource),
        query_params=list(query),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    try:
        response = api.call_api(*serialized)
        response.read()  # type: ignore[no-untyped-call]
        data = api.response_deserialize(response, {"2XX": "object"}).data
    except ApiException as error:
        raise KubeError(
            f"{verb} {ref.key}: {error.status} {apiserver_message(error)}", status=error.status or 0
        ) from None
    except urllib3.exceptions.HTTPError as error:
        raise KubeError(f"{verb} {ref.key}: the apiserver is unreachable: {error}") from None
    return data if isinstance(data, dict) else {}


def apiserver_message(error: ApiException) -> str:
    """The message of the apiserver's Status body, else the HTTP reason."""
    try:
        status = json.loads(error.body or "")
    except ValueError:
        status = None
    if isinstance(status, dict) and status.get("message"):
        return str(status["message"])
    return str(error.reason or "no message")
