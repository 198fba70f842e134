"""Kueue's own objects on a real cluster -> the rows of their kinds.

ResourceFlavors, Cohorts, ClusterQueues, LocalQueues, WorkloadPriorityClasses, Topologies,
AdmissionChecks, and Kueue's Configuration (the `controller_manager_config.yaml` key of the
ConfigMap `kueue-system/kueue-manager-config`), parsed by the normalisers `kubectl apply`
goes through (workloads/manifests). One Accelplane did not apply becomes a row managed
elsewhere until an admin adopts it (services.adopt_queue_object). An object that fails to
parse is recorded with the error on its watch's row (KubeWatch.unreadable), and its row, if
it has one, keeps the last spec that parsed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from clusters.models import Cluster
from workloads import manifests, services
from workloads.kube.apply import CONFIG_KEY, CONFIG_MAP, RESOURCES
from workloads.kube.ingest import note
from workloads.manifests import KUEUE_STORAGE_VERSION, Document, ManifestError
from workloads.models import QUEUE_MODELS, KubeWatch

# Kueue's kinds read from a cluster, by the plural of their CRD.
KINDS: tuple[str, ...] = (
    "ResourceFlavor",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "WorkloadPriorityClass",
    "Topology",
    "AdmissionCheck",
)
CONFIGURATION: str = "Configuration"
# What Accelplane keeps of a served object: the rest is the apiserver's (status, uid, ...).
_KEPT = ("apiVersion", "kind", "spec", "value", "description")


def plural(kind: str) -> str:
    return RESOURCES[("kueue.x-k8s.io", kind)][0]


def resource(kind: str) -> str:
    """The KubeWatch resource of a kind: plural.group, or the ConfigMaps of kueue-system."""
    return "configmaps.kueue-system" if kind == CONFIGURATION else f"{plural(kind)}.kueue.x-k8s.io"


def _key(kind: str, obj: Mapping[str, Any]) -> str:
    """`Kind/namespace/name` of the object as served (a ConfigMap's for the Configuration)."""
    metadata = obj.get("metadata") or {}
    served = "ConfigMap" if kind == CONFIGURATION else kind
    parts = (served, metadata.get("namespace", ""), metadata.get("name", ""))
    return "/".join(p for p in parts if p)


def document(kind: str, obj: Mapping[str, Any], cluster: Cluster) -> Document | None:
    """The object as a document to apply; None for a ConfigMap that is not Kueue's."""
    metadata = obj.get("metadata") or {}
    source = f"cluster {cluster.name}: {_key(kind, obj)}"
    if kind == CONFIGURATION:
        if metadata.get("name") != CONFIG_MAP:
            return None
        text = (obj.get("data") or {}).get(CONFIG_KEY)
        if not isinstance(text, str):
            raise ManifestError(f"has no {CONFIG_KEY} key", source=source)
    else:
        kept = {"name": metadata.get("name", "")}
        if metadata.get("namespace"):
            kept["namespace"] = metadata["namespace"]
        # JSON is YAML: the same loader as an apply, names and versions checked alike.
        # A list's items may come without apiVersion and kind.
        served = {"apiVersion": KUEUE_STORAGE_VERSION, "kind": kind}
        served |= {k: obj[k] for k in _KEPT if k in obj}
        text = json.dumps({**served, "metadata": kept})
    (doc, *others) = manifests.load_documents(text, source=source)
    if others or doc.kind != kind:
        raise ManifestError(f"holds {len(others) + 1} documents, not one {kind}", source=source)
    return doc


def ingest(kind: str, cluster: Cluster, obj: Mapping[str, Any], now: datetime) -> int:
    """Brings the kind's row in line with the object; no events (nothing was applied)."""
    try:
        doc = document(kind, obj, cluster)
        if doc is None:
            return 0
        spec = manifests.queue_spec(doc)
    except ManifestError as error:
        _note(cluster, kind, _key(kind, obj), str(error))
        return 0
    _note(cluster, kind, _key(kind, obj), None)
    services.observe_queue_object(cluster, doc, spec, now)
    return 0


def forget(kind: str, cluster: Cluster, obj: Mapping[str, Any]) -> None:
    """Deleted on the cluster: its row goes if it is managed elsewhere (one Accelplane owns
    is deleted through Accelplane; applying it again recreates it)."""
    metadata = obj.get("metadata") or {}
    _note(cluster, kind, _key(kind, obj), None)
    rows: QuerySet[Any] = QUEUE_MODELS[kind]._default_manager.filter(
        cluster=cluster, managed_elsewhere=True
    )
    if kind == CONFIGURATION:
        if metadata.get("name") == CONFIG_MAP:
            rows.delete()
        return
    rows = rows.filter(name=metadata.get("name", ""))
    if QUEUE_MODELS[kind].NAMESPACED:
        rows = rows.filter(namespace=metadata.get("namespace", ""))
    rows.delete()


def keep_only(kind: str, cluster: Cluster, items: list[Mapping[str, Any]]) -> None:
    listed = [obj.get("metadata") or {} for obj in items]
    if kind == CONFIGURATION:
        if not any(m.get("name") == CONFIG_MAP for m in listed):
            services.forget_queue_objects(cluster, kind, [])
        return
    services.forget_queue_objects(
        cluster, kind, [(m.get("namespace", ""), m.get("name", "")) for m in listed]
    )
    keys = {_key(kind, {"metadata": m}) for m in listed}
    state = KubeWatch.objects.filter(cluster=cluster, resource=resource(kind)).first()
    if state is not None and set(state.unreadable) - keys:
        state.unreadable = {k: v for k, v in state.unreadable.items() if k in keys}
        state.save(update_fields=["unreadable"])


def _note(cluster: Cluster, kind: str, key: str, error: str | None) -> None:
    note(cluster, resource(kind), key, error)
