"""Nodes and Pods of a real cluster, mirrored into rows: the pages then show its live
accelerator allocation as they show a simulated cluster's, and explain and what-if see the
nodes that registered and what the pods on them take.

Nodes: those of Accelplane's node pools (GKE's `cloud.google.com/gke-nodepool` label); the
first list replaces the machine catalog's stand-ins with the nodes that registered.
Pods: those of objects submitted through Accelplane, found by the labels and owners their
controllers give them. Neither makes events: the Kueue Workload watch tells admission's story.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db import transaction

from clusters.models import Cluster, Node, NodePool
from workloads.kube.ingest import kube_time
from workloads.manifests.errors import ManifestError
from workloads.manifests.fields import Fields
from workloads.manifests.podsets import pod_requests
from workloads.models import KubeObject, Pod, Workload
from workloads.quantities import QuantityError, parse_quantity

POOL_LABEL = "cloud.google.com/gke-nodepool"
PODSET_LABEL = "kueue.x-k8s.io/podset"
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
# The label each controller puts on its pods, by the kind of the object users submit; JobSet
# first: its pods carry their child Job's label too.
OWNER_LABELS = {
    "JobSet": "jobset.sigs.k8s.io/jobset-name",
    "LeaderWorkerSet": "leaderworkerset.sigs.k8s.io/name",
    "Job": "batch.kubernetes.io/job-name",
}
HOLDING_NODE = (Pod.Phase.PENDING, Pod.Phase.RUNNING)


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or []}


# Nodes.


def serialized(cluster: Cluster) -> None:
    """Pods and Nodes are watched apart, each by its own worker: their transactions take the
    cluster's row lock, so that a pod and its node ingested at the same moment still meet
    (whichever commits second sees the other and binds the pod). A no-key lock: the
    Workloads' watch, inserting rows that point at the cluster, must not wait on it."""
    locked = Cluster.objects.select_for_update(no_key=True).filter(pk=cluster.pk)
    list(locked.values_list("pk"))


def ingest_node(cluster: Cluster, obj: Mapping[str, Any], now: datetime) -> int:
    metadata = _metadata(obj)
    labels = metadata.get("labels") or {}
    pool = NodePool.objects.filter(cluster=cluster, name=labels.get(POOL_LABEL, "")).first()
    if pool is None:
        return 0  # GKE's default pool, or one made outside Accelplane
    with transaction.atomic():
        serialized(cluster)
        _store_node(cluster, pool, obj)
    return 0


def _store_node(cluster: Cluster, pool: NodePool, obj: Mapping[str, Any]) -> None:
    metadata = _metadata(obj)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    ready = _conditions(obj).get("Ready", {}).get("status") == "True"
    row, _ = Node.objects.update_or_create(
        cluster=cluster,
        name=metadata.get("name", ""),
        defaults={
            "node_pool": pool,
            "labels": metadata.get("labels") or {},
            "taints": [
                {"key": t.get("key", ""), "value": t.get("value", ""), "effect": t.get("effect")}
                for t in spec.get("taints") or []
            ],
            "allocatable": _resources(status.get("allocatable")),
            "capacity": _resources(status.get("capacity")),
            "ready": ready and not spec.get("unschedulable", False),
        },
    )
    # A pod seen before its node is bound to it now.
    waiting = Pod.objects.filter(cluster=cluster, node__isnull=True, phase__in=HOLDING_NODE)
    waiting.filter(scheduling__node_name=row.name).update(node=row)


def _resources(values: Mapping[str, Any] | None) -> dict[str, int]:
    """Quantities in milli-units; one the apiserver would not have written is left out."""
    milli = {}
    for resource, value in (values or {}).items():
        try:
            milli[resource] = parse_quantity(value, field=resource)
        except QuantityError:
            continue
    return milli


def forget_node(cluster: Cluster, obj: Mapping[str, Any]) -> None:
    Node.objects.filter(cluster=cluster, name=_metadata(obj).get("name", "")).delete()


def keep_nodes(cluster: Cluster, items: Iterable[Mapping[str, Any]]) -> None:
    """After a list: nodes gone while nobody watched, and the catalog's stand-ins, go."""
    names = [_metadata(obj).get("name", "") for obj in items]
    Node.objects.filter(cluster=cluster).exclude(name__in=names).delete()


# Pods.


def ingest_pod(cluster: Cluster, obj: Mapping[str, Any], now: datetime) -> int:
    metadata = _metadata(obj)
    namespace, name = metadata.get("namespace", ""), metadata.get("name", "")
    owner = _owner(cluster, obj)
    if owner is None:
        return 0  # not submitted through Accelplane
    spec = obj.get("spec") or {}
    conditions = _conditions(obj)
    phase = _phase(obj)
    node_name = spec.get("nodeName") if phase in HOLDING_NODE else None
    labels = metadata.get("labels") or {}
    scheduled = conditions.get("PodScheduled", {})
    with transaction.atomic():
        serialized(cluster)
        existing = Pod.objects.filter(cluster=cluster, namespace=namespace, name=name).first()
        replica = _replica_index(owner, labels)
        Pod.objects.update_or_create(
            cluster=cluster,
            namespace=namespace,
            name=name,
            defaults={
                "owner": owner,
                "workload": _workload(owner, replica, existing),
                "pod_set": labels.get(PODSET_LABEL, "main"),
                "replica_index": replica,
                "phase": phase,
                "scheduling": {
                    "node_name": node_name or "",
                    "requests": _requests(obj),
                    "node_selector": spec.get("nodeSelector") or {},
                    "tolerations": spec.get("tolerations") or [],
                    "required_node_affinity": [],
                },
                "node": Node.objects.filter(cluster=cluster, name=node_name).first()
                if node_name
                else None,
                "created_at": kube_time(metadata.get("creationTimestamp"), now),
                "bound_at": kube_time(scheduled.get("lastTransitionTime"), now)
                if scheduled.get("status") == "True"
                else None,
                "ready": conditions.get("Ready", {}).get("status") == "True",
            },
        )
    return 0


def _owner(cluster: Cluster, obj: Mapping[str, Any]) -> KubeObject | None:
    metadata = _metadata(obj)
    labels = metadata.get("labels") or {}
    found = next(
        ((kind, labels[label]) for kind, label in OWNER_LABELS.items() if label in labels), None
    )
    if found is None:
        replica_sets = [
            ref.get("name", "")
            for ref in metadata.get("ownerReferences") or []
            if ref.get("kind") == "ReplicaSet"
        ]
        if not replica_sets:
            return None
        # A Deployment's ReplicaSet is <deployment>-<pod template hash>.
        found = ("Deployment", replica_sets[0].rsplit("-", 1)[0])
    kind, name = found
    return KubeObject.objects.filter(
        cluster=cluster, kind=kind, namespace=metadata.get("namespace", ""), name=name
    ).first()


def _phase(obj: Mapping[str, Any]) -> str:
    phase = (obj.get("status") or {}).get("phase", "Pending")
    if phase == "Pending" and (obj.get("spec") or {}).get("schedulingGates"):
        return Pod.Phase.SCHEDULING_GATED  # Kueue (or TAS) has not released it yet
    return phase if phase in Pod.Phase.values else Pod.Phase.PENDING


def _requests(obj: Mapping[str, Any]) -> dict[str, int]:
    """What the pod requests, as Kueue counts it; a spec we cannot read counts nothing."""
    name = _metadata(obj).get("name", "")
    try:
        return pod_requests(Fields("pod", None, name), obj.get("spec") or {}, "spec")
    except ManifestError:
        return {}


def _replica_index(owner: KubeObject, labels: Mapping[str, str]) -> int:
    if owner.kind == "LeaderWorkerSet":
        index = labels.get(LWS_GROUP_LABEL, "0")
        return int(index) if index.isdigit() else 0
    return 0


def _workload(owner: KubeObject, replica: int, existing: Pod | None) -> Workload | None:
    """The row the pod runs for: the owner's active workload (an LWS group's; for a
    Deployment, the replica whose pod this is, or the first replica without a pod)."""
    rows = Workload.objects.filter(owner=owner, phase__in=Workload.ACTIVE_PHASES)
    held = existing.workload_id if existing is not None else None
    kept = rows.filter(pk=held).first() if held is not None else None
    if kept is not None:
        return kept
    if owner.kind == "Deployment":
        rows = rows.filter(pods__isnull=True)
    elif owner.kind == "LeaderWorkerSet":
        rows = rows.filter(replica_index=replica)
    return rows.order_by("replica_index", "-queued_at").first()


def forget_pod(cluster: Cluster, obj: Mapping[str, Any]) -> None:
    metadata = _metadata(obj)
    Pod.objects.filter(
        cluster=cluster, namespace=metadata.get("namespace", ""), name=metadata.get("name", "")
    ).delete()


def keep_pods(cluster: Cluster, items: Iterable[Mapping[str, Any]]) -> None:
    """After a list: pods deleted while nobody watched go."""
    listed = {(_metadata(o).get("namespace", ""), _metadata(o).get("name", "")) for o in items}
    rows = Pod.objects.filter(cluster=cluster).values_list("pk", "namespace", "name")
    gone = [pk for pk, namespace, name in rows if (namespace, name) not in listed]
    Pod.objects.filter(pk__in=gone).delete()
