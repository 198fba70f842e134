"""Simulated pods: what Kubernetes controllers create, gate, delete and recreate."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from controlplane import bulk
from workloads.models import KubeObject, Pod, ResourceFlavor, Workload

KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
# The characters of Kubernetes' generated name suffixes (apimachinery util/rand: no vowels, no
# digits that look like letters), five of them as the ReplicaSet controller makes.
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
SUFFIX_LENGTH = 5
SUFFIXES = len(SUFFIX_ALPHABET) ** SUFFIX_LENGTH  # 27**5 = 3**15
# Not a multiple of 3, so `index * STRIDE` visits every suffix once before any repeats.
SUFFIX_STRIDE = 7_368_787


def short_hash(*parts: object, length: int = 5) -> str:
    """Deterministic stand-in for the random suffixes Kubernetes controllers generate."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()
    return digest[:length]


def replica_suffix(owner: KubeObject, replica: int) -> str:
    """A Deployment replica's pod-name suffix. It looks random, as the ReplicaSet controller's
    do, but is a bijection of the replica index within a generation: thousands of replicas never
    collide (random suffixes would, and Kubernetes retries them; we do not need to)."""
    offset = int(short_hash(owner.pk, owner.generation, "pod", length=8), 16)
    number = (replica * SUFFIX_STRIDE + offset) % SUFFIXES
    chars = []
    for _ in range(SUFFIX_LENGTH):
        number, digit = divmod(number, len(SUFFIX_ALPHABET))
        chars.append(SUFFIX_ALPHABET[digit])
    return "".join(chars)


def is_pod_owned(owner: KubeObject) -> bool:
    """Deployment pods are Kueue workloads of their own (pod integration)."""
    return owner.kind == "Deployment"


def scheduling(
    pod_set: Mapping[str, Any], flavors: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """The pod's scheduling fields once Kueue has injected its flavors' labels and tolerations."""
    node_selector = dict(pod_set.get("node_selector") or {})
    tolerations = list(pod_set.get("tolerations") or ())
    for flavor in flavors:
        node_selector.update(flavor.get("node_labels") or {})
        tolerations.extend(flavor.get("tolerations") or ())
    return {
        "requests": dict(pod_set["requests"]),
        "node_selector": node_selector,
        "tolerations": tolerations,
        "required_node_affinity": list(pod_set.get("required_node_affinity") or ()),
    }


def pod_names(owner: KubeObject, pod_set: str, count: int, replica: int) -> list[str]:
    if owner.kind == "Job":
        return [
            f"{owner.name}-{i}-{short_hash(owner.pk, owner.generation, i)}" for i in range(count)
        ]
    if owner.kind == "JobSet":
        return [
            f"{owner.name}-{pod_set}-{i}-{short_hash(owner.pk, pod_set, i)}" for i in range(count)
        ]
    if owner.kind == "LeaderWorkerSet":
        if pod_set == "leader":
            return [f"{owner.name}-{replica}"]
        return [f"{owner.name}-{replica}-{i + 1}" for i in range(count)]
    # A Deployment replica is one pod.
    template_hash = short_hash(owner.pk, owner.generation, "rs", length=10)
    return [f"{owner.name}-{template_hash}-{replica_suffix(owner, replica)}"]


def create_gated(row: Workload, now: datetime) -> None:
    """A Deployment replica's pod: it exists at once, held by Kueue's scheduling gate."""
    pod_set = row.pod_sets[0]
    Pod.objects.create(
        cluster_id=row.cluster_id,
        owner=row.owner,
        workload=row,
        name=pod_names(row.owner, pod_set["name"], 1, row.replica_index)[0],
        namespace=row.namespace,
        pod_set=pod_set["name"],
        replica_index=row.replica_index,
        phase=Pod.Phase.SCHEDULING_GATED,
        scheduling=scheduling(pod_set),
        created_at=now,
    )


def create_unmanaged(
    owner: KubeObject, pod_sets: Sequence[Mapping[str, Any]], replicas: range, now: datetime
) -> None:
    """Pods of an object without a queue-name label go straight to kube-scheduler."""
    Pod.objects.bulk_create(
        Pod(
            cluster_id=owner.cluster_id,
            owner=owner,
            name=name,
            namespace=owner.namespace,
            pod_set=pod_set["name"],
            replica_index=replica,
            phase=Pod.Phase.PENDING,
            scheduling=_exclusive(scheduling(pod_set), f"{owner.name}-{replica}", pod_set, index),
            created_at=now,
        )
        for replica in replicas
        for pod_set in pod_sets
        for index, name in enumerate(pod_names(owner, pod_set["name"], pod_set["count"], replica))
    )


def replicas_to_remove(
    owner: KubeObject, replicas: Mapping[int, Sequence[Pod]], count: int
) -> list[int]:
    """The `count` replica indexes scaling down removes, of `replicas` (index -> its pods; a
    group Kueue has not admitted has none). A LeaderWorkerSet's groups are its leader
    StatefulSet's ordinals: the highest go. A Deployment's ReplicaSet ranks its pods."""
    if owner.kind == "LeaderWorkerSet":
        return sorted(replicas, reverse=True)[:count]
    return sorted(replicas, key=lambda index: _scale_down_rank(replicas[index]))[:count]


def _scale_down_rank(pods: Sequence[Pod]) -> tuple[int, float]:
    """ReplicaSet scale-down: unplaced pods first (no pods at all first of those), then not
    ready, then the newest."""
    if not pods:
        return 0, -math.inf
    if any(p.node_id is None for p in pods):
        rank = 0
    elif not all(p.ready for p in pods):
        rank = 1
    else:
        rank = 2
    return rank, -max(p.bound_at or p.created_at for p in pods).timestamp()


def _flavor_specs(
    rows: Sequence[Workload], known: Mapping[str, str] | None
) -> dict[str, dict[str, Any]]:
    names = {f for row in rows for p in row.assignments for f in p["flavors"].values()}
    if not names:
        return {}
    if known is not None:
        return {name: json.loads(known[name]) for name in names if name in known}
    flavors = ResourceFlavor.objects.filter(cluster_id=rows[0].cluster_id, name__in=names)
    return dict(flavors.values_list("name", "spec"))


STARTED_POD_FIELDS = [
    "cluster",
    "owner",
    "workload",
    "name",
    "namespace",
    "pod_set",
    "replica_index",
    "phase",
    "scheduling",
    "created_at",
]


def start(
    rows: Sequence[Workload], now: datetime, flavor_specs: Mapping[str, str] | None = None
) -> None:
    """Admitted: ungate each pod (Deployment) or unsuspend each job (create its pods).

    `flavor_specs`: the cluster's ResourceFlavor specs as JSON text by name, when the caller
    has read them (an admission run's snapshot); else they are read."""
    specs = _flavor_specs(rows, flavor_specs)
    # Rows of one shape may share their pod sets (`ClusterSnapshot.fetch_to_write`): their
    # pods then share one spec, encoded once (`bulk`). By identity: `rows` holds each pod set.
    shared: dict[tuple[int, tuple[str, ...]], dict[str, Any]] = {}
    new_pods, ungated = [], []
    for row in rows:
        for assignment in row.assignments:
            pod_set = next(p for p in row.pod_sets if p["name"] == assignment["name"])
            flavor_names = tuple(sorted(set(assignment["flavors"].values())))
            spec = shared.get((id(pod_set), flavor_names))
            if spec is None:
                flavors = [specs[f] for f in flavor_names if f in specs]
                spec = shared[id(pod_set), flavor_names] = scheduling(pod_set, flavors)
            selectors = domain_selectors(assignment)
            if is_pod_owned(row.owner):
                ungated.append((row.pk, Pod.Phase.PENDING, _pinned(spec, selectors[0])))
                continue
            names = pod_names(row.owner, pod_set["name"], assignment["count"], row.replica_index)
            new_pods += [
                (
                    row.cluster_id,
                    row.owner_id,
                    row.pk,
                    name,
                    row.namespace,
                    pod_set["name"],
                    row.replica_index,
                    Pod.Phase.PENDING,
                    _exclusive(_pinned(spec, selector), row.name, pod_set, index),
                    now,
                )
                for index, (name, selector) in enumerate(zip(names, selectors, strict=True))
            ]
    bulk.update_rows(Pod, "workload", ["phase", "scheduling"], ungated)
    bulk.insert_rows(Pod, STARTED_POD_FIELDS, new_pods)


def domain_selectors(assignment: Mapping[str, Any]) -> list[dict[str, str]]:
    """Kueue's TopologyUngater: each pod of a topology assignment gets the labels of its leaf
    domain as node selector, so it lands only there; one entry per pod, in domain order."""
    topology = assignment.get("topology")
    if not topology:
        return [{} for _ in range(assignment["count"])]
    return [
        dict(zip(topology["levels"], domain["values"], strict=True))
        for domain in topology["domains"]
        for _ in range(domain["count"])
    ]


def _exclusive(
    spec: dict[str, Any], owner: str, pod_set: Mapping[str, Any], index: int
) -> dict[str, Any]:
    """JobSet/LWS exclusive placement: the pod's group is its Job (JobSet) or all of `owner`
    (an LWS group's workload)."""
    key = pod_set.get("exclusive_topology")
    if not key:
        return spec
    group = owner
    per_group = pod_set.get("exclusive_group_pods")
    if per_group:
        group = f"{owner}/{pod_set['name']}/{index // per_group}"
    return {**spec, "exclusive": {"key": key, "group": group}}


def _pinned(spec: dict[str, Any], selector: Mapping[str, str]) -> dict[str, Any]:
    if not selector:
        return spec
    return {**spec, "node_selector": {**spec["node_selector"], **selector}}


def stop(rows: Sequence[Workload]) -> None:
    """Evicted: the jobs are suspended (pods deleted); a Deployment's pod is recreated gated.
    A statement per distinct scheduling of the gated pods, not one per workload."""
    deleted: list[int] = []
    gated: dict[str, tuple[dict[str, Any], list[int]]] = {}
    for row in rows:
        if is_pod_owned(row.owner):
            spec = scheduling(row.pod_sets[0])
            gated.setdefault(json.dumps(spec, sort_keys=True), (spec, []))[1].append(row.pk)
        else:
            deleted.append(row.pk)
    for spec, pks in gated.values():
        bulk.update_keys(
            Pod,
            "workload",
            pks,
            phase=Pod.Phase.SCHEDULING_GATED,
            node=None,
            bound_at=None,
            ready_at=None,
            ready=False,
            scheduling=spec,
        )
    if deleted:
        Pod.objects.filter(workload_id__in=deleted).delete()


def complete(row: Workload, phase: str) -> None:
    """The workload ended: its pods terminate and free their nodes."""
    Pod.objects.filter(workload=row).update(phase=phase, node=None, ready=False)
