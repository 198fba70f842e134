"""What the pages show, read from the rows: accelerator totals, nodes, TPU cubes, queue bars.

Read-only, and scoped: a team member sees another team's workloads only as "another team".
Quantities are counts (GPUs, TPU chips) unless a field says it is a Kubernetes string.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from clusters.catalog import GPU_RESOURCE, LABEL_TPU_SLICE, TPU_RESOURCE
from clusters.models import Cluster, Node, NodePool
from teams.models import TeamNamespace
from teams.services import Scope
from teams.visibility import shown_events, visible_events
from workloads.models import ClusterQueue, KubeObject, Pod, Slice, Workload
from workloads.quantities import format_quantity, parse_quantity
from workloads.status import cluster_queue_usages

ACCELERATORS = ((GPU_RESOURCE, "GPUs"), (TPU_RESOURCE, "TPU chips"))
BOUND_PHASES = (Pod.Phase.PENDING, Pod.Phase.RUNNING)
HIDDEN = "another team's workload"
# Workload colours on the TPU map and the node table (accelplane.css .c0 to .c7).
PALETTE_SIZE = 8
FEED_LENGTH = 40
TIMELINE_LENGTH = 500
TIMELINE_SKIPS = ("checkpoint.saved",)


def colour(key: str) -> str:
    """A stable colour class for a workload owner, the same on every page."""
    return f"c{int(hashlib.sha1(key.encode()).hexdigest(), 16) % PALETTE_SIZE}"


def latest_seq(caller: Scope) -> int:
    """The newest event the caller may see: the page is rendered up to here."""
    return visible_events(caller).order_by("-id").values_list("id", flat=True).first() or 0


def recent_events(caller: Scope) -> list[dict[str, Any]]:
    """The newest events the caller may see, newest first."""
    return shown_events(caller, visible_events(caller).order_by("-id")[:FEED_LENGTH])


def timeline(caller: Scope, obj: KubeObject) -> list[dict[str, Any]]:
    """Everything that happened to an object, oldest first; its checkpoints have their own
    table, so they are left out."""
    rows = (
        visible_events(caller)
        .filter(cluster=obj.cluster.name, object_key=obj.key)
        .exclude(kind__in=TIMELINE_SKIPS)
    )
    return shown_events(caller, rows.order_by("id")[:TIMELINE_LENGTH])


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
    return {pk: _accelerator_rows(total[pk], used[pk]) for pk in ids}


def _accelerator_rows(total: dict[str, int], used: dict[str, int]) -> list[dict[str, Any]]:
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


def team_usage(caller: Scope) -> list[dict[str, Any]]:
    """GPUs and TPU chips each team's admitted workloads hold, in every cluster. A team member
    sees their own teams by name and everybody else as one row."""
    team_of = dict(TeamNamespace.objects.values_list("name", "team__name"))
    held: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in Workload.objects.filter(phase__in=Workload.HOLDING_QUOTA):
        name = team_of.get(row.namespace, f"namespace {row.namespace}")
        if not caller.can_read(row.namespace):
            name = "other teams"
        by_name = {p["name"]: p for p in row.pod_sets}
        for assignment in row.assignments:
            requests = by_name[assignment["name"]]["requests"]
            for resource, _ in ACCELERATORS:
                held[name][resource] += requests.get(resource, 0) * assignment["count"]
    return [
        {
            "team": name,
            "gpus": held[name][GPU_RESOURCE] // 1000,
            "tpus": held[name][TPU_RESOURCE] // 1000,
        }
        for name in sorted(held, key=lambda n: (n == "other teams", n))
    ]


def _pod_users(cluster: Cluster, caller: Scope) -> dict[int, list[dict[str, Any]]]:
    """Node id -> the workloads whose pods are bound to it, with the accelerators they hold."""
    users: dict[int, list[dict[str, Any]]] = defaultdict(list)
    pods = Pod.objects.filter(cluster=cluster, node__isnull=False, phase__in=BOUND_PHASES)
    for pod in pods.select_related("owner"):
        assert pod.node_id is not None
        requests = pod.scheduling.get("requests", {})
        chips = sum(requests.get(r, 0) for r, _ in ACCELERATORS) // 1000
        visible = caller.can_read(pod.namespace)
        users[pod.node_id].append(
            {
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
    users = _pod_users(cluster, caller)
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


def _slice_owners(cluster: Cluster, caller: Scope) -> dict[str, dict[str, Any]]:
    """Host name -> the slice on it, its topology and its workload (as the caller may see it)."""
    hosts: dict[str, dict[str, Any]] = {}
    for row in Slice.objects.filter(cluster=cluster).select_related("workload__owner"):
        visible = caller.can_read(row.workload.namespace)
        owner = row.workload.owner.key
        info = {
            "slice": row.name if visible else "",
            "index": row.name.rsplit("-", 1)[-1],
            "topology": row.topology,
            "state": row.state,
            "label": owner if visible else HIDDEN,
            "object_id": row.workload.owner_id if visible else None,
            "colour": colour(owner) if visible else "hidden",
            "super": len(row.node_pools) > 1,
        }
        for host in row.hosts:
            hosts[host] = info
    return hosts


def tpu_map(cluster: Cluster, caller: Scope) -> dict[str, list[Any]]:
    """Cubes (tpu7x pools, 16 hosts at chip coordinates) as rows of (x, y) and columns of z,
    v5e pools as their slices of hosts, each host with what runs on it; and TPU pools whose
    nodes are not there yet."""
    slices = _slice_owners(cluster, caller)
    users = _pod_users(cluster, caller)
    cubes: list[dict[str, Any]] = []
    v5e: list[dict[str, Any]] = []
    waiting: list[NodePool] = []
    pools = NodePool.objects.filter(cluster=cluster).exclude(tpu_topology="")
    for pool in pools.prefetch_related("nodes"):
        nodes = list(pool.nodes.all())
        if nodes and all(n.coordinates for n in nodes):
            cubes.append({"pool": pool, "rows": _cube_rows(nodes, slices)})
        elif nodes:
            v5e.append({"pool": pool, "slices": _host_groups(nodes, users)})
        else:
            waiting.append(pool)
    return {"cubes": cubes, "v5e": v5e, "waiting": waiting}


def _cube_rows(nodes: Iterable[Node], slices: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    grid: dict[tuple[int, int], dict[int, dict[str, Any]]] = defaultdict(dict)
    for node in nodes:
        assert node.coordinates is not None  # cube hosts have chip coordinates
        x, y, z = node.coordinates
        grid[(x, y)][z] = {"node": node, "slice": slices.get(node.name)}
    return [
        {"x": x, "y": y, "hosts": [grid[(x, y)][z] for z in sorted(grid[(x, y)])]}
        for x, y in sorted(grid)
    ]


def _host_groups(
    nodes: Iterable[Node], users: dict[int, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for node in nodes:
        on_node = users.get(node.pk, [])
        groups[node.labels.get(LABEL_TPU_SLICE, node.name)].append(
            {"node": node, "user": on_node[0] if on_node else None}
        )
    return [{"name": name, "hosts": hosts} for name, hosts in sorted(groups.items())]


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
        usage["spec"] = cq.spec
        cohorts[cq.cohort_name].append(usage)
    return [
        {"cohort": name, "queues": cohorts[name]}
        for name in sorted(cohorts, key=lambda n: (n == "", n))
    ]
