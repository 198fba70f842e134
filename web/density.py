"""How full the accelerators are: per node pool and flavor, per team (queued or not), per
workload, and over the last hour per cluster.

"Held" means requested by a pod bound to a node (Pending or Running there), whether or not
Kueue admitted it: an unqueued Deployment's pods hold their chips as much as a Job's do.
Capacity is what ready nodes have allocatable. Figures are whole GPUs and TPU chips.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from clusters.models import Cluster, Node
from events.models import Event
from teams.models import TeamNamespace
from teams.services import Scope
from web.panels import ACCELERATORS, BOUND_PHASES, accelerator_rows
from workloads import live
from workloads.models import Pod, ResourceFlavor

OTHER_TEAMS = "other teams"
# The usage chart: the last hour, from at most USAGE_EVENTS events of all the clusters shown
# (one query, newest first). Past that many, the chart starts at the oldest one read.
USAGE_WINDOW = timedelta(hours=1)
USAGE_EVENTS = 5000
USAGE_KINDS = (live.PODS, "object.deleted")
CHART_WIDTH, CHART_HEIGHT = 240, 48
# Event data naming the change of each resource (workloads/live.py).
CHANGE_OF = {resource: f"{name}_change" for name, resource in live.HELD.items()}


def _requests(scheduling: Mapping[str, Any]) -> dict[str, int]:
    """A pod's accelerator requests in milli-units."""
    requests = scheduling.get("requests", {})
    return {resource: requests.get(resource, 0) for resource, _ in ACCELERATORS}


def _bound_pods() -> Any:
    return Pod.objects.filter(node__isnull=False, phase__in=BOUND_PHASES)


def held_by_owner(owner_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    """Owner pk -> whole GPUs and TPU chips its bound pods hold ("gpus", "tpus"), one query."""
    held: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(live.HELD, 0))
    pods = _bound_pods().filter(owner_id__in=list(owner_ids))
    for owner_id, scheduling in pods.values_list("owner_id", "scheduling"):
        requests = _requests(scheduling)
        for name, resource in live.HELD.items():
            held[owner_id][name] += requests[resource] // 1000
    return dict(held)


def team_usage(caller: Scope) -> list[dict[str, Any]]:
    """GPUs and TPU chips each team's bound pods hold in every cluster, and how many of those
    no Kueue workload accounts for (pods outside Kueue: `unqueued_gpus`, `unqueued_tpus`). A
    team member sees their own teams by name and everybody else summed as "other teams"; a
    namespace no team owns shows as itself, to admins."""
    team_of = dict(TeamNamespace.objects.values_list("name", "team__name"))
    held: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    pods = _bound_pods().values_list("namespace", "workload_id", "scheduling")
    for namespace, workload_id, scheduling in pods:
        team = team_of.get(namespace, f"namespace {namespace}")
        if not caller.can_read(namespace):
            team = OTHER_TEAMS
        for name, resource in live.HELD.items():
            amount = _requests(scheduling)[resource]
            held[team][name] += amount
            if workload_id is None:
                held[team][f"unqueued_{name}"] += amount
    rows = [
        {"team": team, **{key: value // 1000 for key, value in held[team].items()}}
        for team in sorted(held, key=lambda t: (t == OTHER_TEAMS, t))
    ]
    empty = dict.fromkeys(("gpus", "tpus", "unqueued_gpus", "unqueued_tpus"), 0)
    return [{**empty, **row} for row in rows if row["gpus"] or row["tpus"]]


def utilisation(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    """Allocated against capacity per node pool and per ResourceFlavor (the ready nodes that
    have all its nodeLabels; a flavor without labels covers every node, as in Kueue), in three
    queries; only pools and flavors with accelerators."""
    nodes = list(
        Node.objects.filter(cluster=cluster, ready=True).values_list(
            "pk", "node_pool__name", "labels", "allocatable"
        )
    )
    used: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for node_id, scheduling in (
        _bound_pods().filter(cluster=cluster).values_list("node_id", "scheduling")
    ):
        for resource, amount in _requests(scheduling).items():
            used[node_id][resource] += amount

    def rows(groups: Mapping[str, list[tuple[int, Mapping[str, int]]]]) -> list[dict[str, Any]]:
        result = []
        for name, members in groups.items():
            total: dict[str, int] = defaultdict(int)
            part: dict[str, int] = defaultdict(int)
            for node_id, allocatable in members:
                for resource, _ in ACCELERATORS:
                    total[resource] += allocatable.get(resource, 0)
                    part[resource] += used[node_id][resource]
            accelerators = accelerator_rows(total, part)
            if accelerators:
                result.append({"name": name, "accelerators": accelerators})
        return result

    pools: dict[str, list[tuple[int, Mapping[str, int]]]] = defaultdict(list)
    for pk, pool, _, allocatable in nodes:
        pools[pool].append((pk, allocatable))
    flavors: dict[str, list[tuple[int, Mapping[str, int]]]] = {}
    for flavor in ResourceFlavor.objects.filter(cluster=cluster).order_by("name"):
        wanted = flavor.spec.get("node_labels") or {}
        flavors[flavor.name] = [
            (pk, allocatable)
            for pk, _, labels, allocatable in nodes
            if all(labels.get(k) == v for k, v in wanted.items())
        ]
    return {"pools": rows(dict(sorted(pools.items()))), "flavors": rows(flavors)}


@dataclass(frozen=True)
class Step:
    """From `at` until the next step (or now), `held` of the resource were held."""

    at: datetime
    held: int


def usage_history(
    clusters: Iterable[Cluster], now: datetime, totals: Mapping[int, list[dict[str, Any]]]
) -> dict[int, dict[str, Any]]:
    """Per cluster pk, the accelerators held over the last hour as step charts, one per
    resource its ready nodes have (`totals`: panels.accelerator_totals_by_cluster), worked
    back from what is held now through the changes the `workload.pods` and `object.deleted`
    events record. One query, at most USAGE_EVENTS events for all the clusters."""
    clusters = list(clusters)
    start = now - USAGE_WINDOW
    rows = list(
        Event.objects.filter(
            cluster__in=[c.name for c in clusters], kind__in=USAGE_KINDS, at__gt=start, at__lte=now
        )
        .order_by("-id")
        .values_list("cluster", "at", "data")[:USAGE_EVENTS]
    )
    if len(rows) == USAGE_EVENTS:
        start = rows[-1][1]  # older changes were not read: the chart begins at the oldest read
    by_cluster: dict[str, list[tuple[datetime, Mapping[str, Any]]]] = defaultdict(list)
    for name, at, data in rows:
        by_cluster[name].append((at, data))
    charts = {}
    for cluster in clusters:
        series = []
        for row in totals[cluster.pk]:
            key = CHANGE_OF[row["resource"]]
            steps = _steps(by_cluster[cluster.name], row["used"], start, key)
            series.append(_series(row["label"], steps, start, now, row["total"]))
        charts[cluster.pk] = {"series": series, "start": start, "end": now}
    return charts


def _steps(
    newest_first: list[tuple[datetime, Mapping[str, Any]]], held: int, start: datetime, key: str
) -> list[Step]:
    """Oldest first; changes at one instant (one round) make one step, and a step that ends
    where it began (a pod bound as another was deleted) none. A level below zero (a change
    the log missed) shows as zero."""
    level = held
    ends: list[tuple[datetime, int]] = []  # newest first: (when, held from then on)
    for at, data in newest_first:
        change = data.get(key, 0)
        if not change:
            continue
        if not ends or ends[-1][0] != at:
            ends.append((at, level))
        level -= change
    steps = [Step(start, max(0, level))]
    for at, after in reversed(ends):
        if max(0, after) != steps[-1].held:
            steps.append(Step(at, max(0, after)))
    return steps


def _series(
    label: str, steps: list[Step], start: datetime, end: datetime, whole: int
) -> dict[str, Any]:
    """A step line scaled to the capacity (the top of the chart), as SVG polyline points."""
    span = (end - start).total_seconds() or 1.0
    top = max(whole, *(s.held for s in steps))

    def x(at: datetime) -> float:
        return round(CHART_WIDTH * (at - start).total_seconds() / span, 1)

    def y(held: int) -> float:
        return round(CHART_HEIGHT * (1 - held / top), 1)

    points = []
    for step, following in zip(steps, [*steps[1:], None], strict=True):
        until = end if following is None else following.at
        points += [f"{x(step.at)},{y(step.held)}", f"{x(until)},{y(step.held)}"]
    return {
        "label": label,
        "steps": steps,
        "now": steps[-1].held,
        "peak": max(s.held for s in steps),
        "capacity": whole,
        "points": " ".join(points),
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
    }
