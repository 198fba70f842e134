"""Server-side apply, scale and delete of manifests on a real cluster's REST paths."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import urllib3
import yaml
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
KUEUE_GROUP = "kueue.x-k8s.io"
# The Kueue versions Accelplane reads and writes, newest first: Kueue serves v1beta2 from
# 0.15 on (v1beta1 too, deprecated), v1beta1 only before.
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
# Kueue's manager reads its Configuration from this ConfigMap's key (at its start).
KUEUE_NAMESPACE = "kueue-system"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
# A server-side apply conflict's cause: `conflict with "<manager>" using <apiVersion>`.
CONFLICTING_MANAGER = re.compile(r'conflict with "([^"]+)"')
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
    api: client.ApiClient, manifest: Mapping[str, Any], namespace: str = "", *, force: bool = True
) -> dict[str, Any]:
    """`kubectl apply --server-side -n namespace` of the manifest as submitted, with
    `--force-conflicts` when `force`; without it, fields another manager owns are a
    KubeError (409) listing them. Kueue's Configuration goes into its manager's ConfigMap."""
    if manifest.get("kind") == "Configuration":
        manifest, namespace = configuration_map(manifest), KUEUE_NAMESPACE
    ref = ObjectRef.of_manifest(manifest, namespace)
    if ref.api_version.startswith(f"{KUEUE_GROUP}/"):
        manifest = served_manifest(manifest, kueue_versions(api), ref)
        ref = ObjectRef.of_manifest(manifest, namespace)
    query = [("fieldManager", FIELD_MANAGER)] + ([("force", "true")] if force else [])
    return request(api, "PATCH", ref, "apply", query=query, body=manifest, content_type=APPLY_PATCH)


def kueue_versions(api: client.ApiClient) -> tuple[str, ...]:
    """The Kueue versions both the cluster serves and Accelplane speaks, newest first, from
    the apiserver's discovery of the group (/apis/kueue.x-k8s.io). Without Kueue installed
    (404): the newest, whose calls then answer the apiserver's 404 themselves."""
    try:
        group = _send(api, "GET", f"/apis/{KUEUE_GROUP}", f"discover {KUEUE_GROUP}")
    except KubeError as error:
        if error.status != 404:
            raise
        return KUEUE_VERSIONS[:1]
    served = [str(v.get("version")) for v in group.get("versions") or [] if isinstance(v, dict)]
    spoken = tuple(v for v in KUEUE_VERSIONS if v in served)
    if not spoken:
        raise KubeError(
            f"the cluster serves {KUEUE_GROUP} {', '.join(served) or 'in no version'}; "
            f"Accelplane speaks {' and '.join(KUEUE_VERSIONS)}",
            status=409,
        )
    return spoken


def kueue_version(api: client.ApiClient) -> str:
    """The version Kueue objects are read in: the newest of kueue_versions."""
    return kueue_versions(api)[0]


def served_manifest(
    manifest: Mapping[str, Any], versions: Sequence[str], ref: ObjectRef
) -> dict[str, Any]:
    """A Kueue manifest as submitted when the cluster serves its version; else converted to
    the newest served as Kueue's webhook does (apis/kueue/v1beta1/clusterqueue_conversion.go:
    from v1beta2 to v1beta1 only a ClusterQueue's cohortName is spelled differently,
    `cohort`). Any other conversion is a 409 naming the served versions."""
    if ref.api_version.partition("/")[2] in versions:
        return dict(manifest)
    served = f"{KUEUE_GROUP}/{versions[0]}"

    def refused(what: str) -> KubeError:
        listed = " and ".join(f"{KUEUE_GROUP}/{v}" for v in versions)
        return KubeError(
            f"apply {ref.key}: the cluster's Kueue serves {listed}, where {what} cannot be "
            f"written; submit it as {served}",
            status=409,
        )

    if (ref.api_version, served) != (f"{KUEUE_GROUP}/v1beta2", f"{KUEUE_GROUP}/v1beta1"):
        raise refused(f"a {ref.api_version} manifest")
    spec = dict(manifest.get("spec") or {})
    if ref.kind == "ClusterQueue":
        if "concurrentAdmissionPolicy" in spec:
            raise refused("spec.concurrentAdmissionPolicy (v1beta2 only)")
        if "cohortName" in spec:
            spec["cohort"] = spec.pop("cohortName")
    converted = {**manifest, "apiVersion": served}
    if "spec" in manifest:
        converted["spec"] = spec
    return converted


def configuration_map(configuration: Mapping[str, Any]) -> dict[str, Any]:
    """The ConfigMap holding a Configuration document, without its metadata (Kueue's strict
    decoder refuses fields it does not know)."""
    document = {k: v for k, v in configuration.items() if k != "metadata"}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "namespace": KUEUE_NAMESPACE},
        "data": {CONFIG_KEY: yaml.safe_dump(document, sort_keys=False)},
    }


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
    if ref.api_version.startswith(f"{KUEUE_GROUP}/"):
        # Deleted at the served version: at another the apiserver's 404 would read as gone.
        ref = replace(ref, api_version=f"{KUEUE_GROUP}/{kueue_version(api)}")
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
    path = ref.path(subresource)
    return _send(api, method, path, f"{verb} {ref.key}", query, body, content_type)


def _send(
    api: client.ApiClient,
    method: str,
    path: str,
    what: str,
    query: Sequence[tuple[str, str]] = (),
    body: Mapping[str, Any] | None = None,
    content_type: str = "",
) -> dict[str, Any]:
    """One call to the apiserver; a refusal is a KubeError starting with `what`."""
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    serialized = api.param_serialize(
        method=method,
        resource_path=path,
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
            f"{what}: {error.status} {apiserver_message(error)}",
            status=error.status or 0,
            conflicts=field_conflicts(error),
        ) from None
    except urllib3.exceptions.HTTPError as error:
        raise KubeError(f"{what}: the apiserver is unreachable: {error}") from None
    return data if isinstance(data, dict) else {}


def _status(error: ApiException) -> dict[str, Any]:
    try:
        status = json.loads(error.body or "")
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def apiserver_message(error: ApiException) -> str:
    """The message of the apiserver's Status body, else the HTTP reason."""
    message = _status(error).get("message")
    return str(message) if message else str(error.reason or "no message")


def field_conflicts(error: ApiException) -> list[dict[str, str]]:
    """The FieldManagerConflict causes of a 409 to a server-side apply: who owns which field."""
    if error.status != 409:
        return []
    causes = (_status(error).get("details") or {}).get("causes") or []
    conflicts = []
    for cause in causes:
        if not isinstance(cause, dict) or cause.get("type") != "FieldManagerConflict":
            continue
        manager = CONFLICTING_MANAGER.search(str(cause.get("message", "")))
        conflicts.append(
            {"manager": manager[1] if manager else "", "field": str(cause.get("field", ""))}
        )
    return conflicts
