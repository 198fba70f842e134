"""What the pages show, read from the rows: accelerator totals, nodes, queue bars (the TPU
picture is web/tpu.py).

Read-only, and scoped: a team member sees another team's workloads only as "another team".
Quantities are counts (GPUs, TPU chips) unless a field says it is a Kubernetes string.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from clusters.catalog import GPU_RESOURCE, TPU_RESOURCE
from clusters.models import Cluster, Node, NodePool
from teams.services import Scope
from teams.visibility import shown_events, visible_events
from workloads.models import ClusterQueue, KubeObject, Pod
from workloads.quantities import format_quantity, parse_quantity
from workloads.status import cluster_queue_usages

ACCELERATORS = ((GPU_RESOURCE, "GPUs"), (TPU_RESOURCE, "TPU chips"))
BOUND_PHASES = (Pod.Phase.PENDING, Pod.Phase.RUNNING)
HIDDEN = "another team's workload"
# Workload colours on the TPU map and the node table (accelplane.css .c0 to .c7).
PALETTE_SIZE = 8
FEED_LENGTH = 40
TIMELINE_LENGTH = 500
# Progress as it happens (workloads/live.py): the sections showing it refresh on these, the
# overview's feed leaves them out, and a timeline keeps only its pods' transitions.
FEED_SKIPS = ("workload.pods", "workload.progress", "node.changed")
TIMELINE_SKIPS = ("checkpoint.saved", "workload.progress")


def colour(key: str) -> str:
    """A stable colour class for a workload owner, the same on every page."""
    return f"c{int(hashlib.sha1(key.encode()).hexdigest(), 16) % PALETTE_SIZE}"


def latest_seq(caller: Scope) -> int:
    """The newest event the caller may see: the page is rendered up to here."""
    return visible_events(caller).order_by("-seq").values_list("seq", flat=True).first() or 0


def recent_events(caller: Scope) -> list[dict[str, Any]]:
    """The newest events the caller may see, newest first."""
    rows = visible_events(caller).exclude(kind__in=FEED_SKIPS)
    return shown_events(caller, rows.order_by("-seq")[:FEED_LENGTH])


def timeline(caller: Scope, obj: KubeObject) -> list[dict[str, Any]]:
    """Everything that happened to an object, oldest first; its checkpoints have their own
    table, so they are left out."""
    rows = (
        visible_events(caller)
        .filter(cluster=obj.cluster.name, object_key=obj.key)
        .exclude(kind__in=TIMELINE_SKIPS)
    )
    return shown_events(caller, rows.order_by("seq")[:TIMELINE_LENGTH])


def _percent(part: float, whole: float) -> float:
    return round(100 * part / whole, 1) if whole else 0.0


def accelerator_totals(cluster: Cluster) -> list[dict[str, Any]]:
    """Per accelerator resource the cluster has: chips on ready nodes, held by bound pods, free."""
    return accelerator_totals_by_cluster([cluster])[cluster.pk]


def accelerator_totals_by_cluster(clusters: Iterable[Cluster]) -> dict[int, list[dict[str, Any]]]:
    """`accelerator_totals` of each cluster by pk, in two queries however many clusters."""
    ids = [cluster.pk for cluster in clusters]
    total: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for cluster_id, allocatable in Node.objects.filter(cluster_id__in=ids, ready=True).values_list(
        "cluster_id", "allocatable"
    ):
        for resource, _ in ACCELERATORS:
            total[cluster_id][resource] += allocatable.get(resource, 0)
    used: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for cluster_id, scheduling in Pod.objects.filter(
        cluster_id__in=ids, node__isnull=False, phase__in=BOUND_PHASES
    ).values_list("cluster_id", "scheduling"):
        for resource, _ in ACCELERATORS:
            used[cluster_id][resource] += scheduling.get("requests", {}).get(resource, 0)
    return {pk: accelerator_rows(total[pk], used[pk]) for pk in ids}


def accelerator_rows(total: dict[str, int], used: dict[str, int]) -> list[dict[str, Any]]:
    rows = []
    for resource, label in ACCELERATORS:
        if total[resource]:
            whole, part = total[resource] // 1000, used[resource] // 1000
            rows.append(
                {
                    "resource": resource,
                    "label": label,
                    "total": whole,
                    "used": part,
                    "free": whole - part,
                    "percent": _percent(part, whole),
                }
            )
    return rows


def pod_users(
    cluster: Cluster, caller: Scope, *, tpu_only: bool = False
) -> dict[int, list[dict[str, Any]]]:
    """Node id -> the workloads whose pods are bound to it, with the accelerators they hold;
    `tpu_only`: on the nodes of TPU pools only."""
    users: dict[int, list[dict[str, Any]]] = defaultdict(list)
    pods = Pod.objects.filter(cluster=cluster, node__isnull=False, phase__in=BOUND_PHASES)
    if tpu_only:
        pods = pods.exclude(node__node_pool__tpu_topology="")
    for pod in pods.select_related("owner"):
        assert pod.node_id is not None
        requests = pod.scheduling.get("requests", {})
        chips = sum(requests.get(r, 0) for r, _ in ACCELERATORS) // 1000
        visible = caller.can_read(pod.namespace)
        users[pod.node_id].append(
            {
                "key": pod.owner.key if visible else "",
                "label": pod.owner.key if visible else HIDDEN,
                "object_id": pod.owner_id if visible else None,
                "pod": pod.name if visible else "",
                "chips": chips,
                "ready": pod.ready,
                "colour": colour(pod.owner.key) if visible else "hidden",
            }
        )
    return users


def node_pools(cluster: Cluster, caller: Scope) -> list[dict[str, Any]]:
    """Node pools with their nodes; per node its accelerators and the workloads using them."""
    users = pod_users(cluster, caller)
    result = []
    for pool in NodePool.objects.filter(cluster=cluster).prefetch_related("nodes"):
        nodes = []
        for node in pool.nodes.all():
            chips = sum(node.allocatable.get(r, 0) for r, _ in ACCELERATORS) // 1000
            accelerator = node.labels.get("cloud.google.com/gke-accelerator") or node.labels.get(
                "cloud.google.com/gke-tpu-accelerator", ""
            )
            on_node = users.get(node.pk, [])
            nodes.append(
                {
                    "node": node,
                    "accelerator": accelerator,
                    "chips": chips,
                    "used": sum(u["chips"] for u in on_node),
                    "users": on_node,
                }
            )
        result.append({"pool": pool, "nodes": nodes})
    return result


def _milli(resource: str, value: str | None) -> int:
    # Unbounded: these are sums, and rows stored before quantities were bounded may be huge.
    return 0 if value is None else parse_quantity(value, field=resource, bounded=False)


def _bar(resource: dict[str, Any]) -> dict[str, Any]:
    """The row's quantities stay Kubernetes strings (the `quantity` filter shows them); the
    segments are in exact milli-units, so a `999999Pi` quota neither overflows nor rounds."""
    name = resource["resource"]
    nominal = _milli(name, resource["nominal"])
    used = _milli(name, resource["used"])
    borrowed = _milli(name, resource["borrowed"])
    pending = _milli(name, resource["pending"])
    lendable = max(0, nominal - used)
    if resource["lending_limit"] is not None:
        lendable = min(lendable, _milli(name, resource["lending_limit"]))
    scale = max(nominal, used, nominal + pending, used + pending) or 1
    return {
        **resource,
        "lendable": format_quantity(name, lendable),
        "segments": {
            "used": _percent(used - borrowed, scale),
            "borrowed": _percent(borrowed, scale),
            "pending": _percent(pending, scale),
            "nominal": _percent(nominal, scale),
        },
    }


def queue_bars(cluster: Cluster) -> list[dict[str, Any]]:
    """ClusterQueues grouped by cohort (cohort name "" for those in none), each with a bar per
    flavor and resource: used within nominal, borrowed, pending demand, and the nominal mark."""
    cohorts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    queues = list(ClusterQueue.objects.filter(cluster=cluster))
    usages = cluster_queue_usages(cluster, queues)
    for cq in queues:
        usage = usages[cq.name]
        usage["bars"] = [_bar(r) for r in usage["resources"]]
        usage["managed_elsewhere"] = cq.managed_elsewhere
        cohorts[cq.cohort_name].append(usage)
    return [
        {"cohort": name, "queues": cohorts[name]}
        for name in sorted(cohorts, key=lambda n: (n == "", n))
    ]
