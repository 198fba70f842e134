"""The simulated cluster: kubelet, job controllers and training progress on a clock.

`simulate_round(cluster, now)` is one round of it at one instant; admission.settle alternates
its own cycles with these rounds until nothing changes. `next_event_at` says when the simulated
world next changes by itself (a pod becoming ready, a checkpoint, a job finishing), so that
virtual hours cost little.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, F, Max, Min, Q, QuerySet, TextField
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

import scheduler
from clusters.models import Cluster, Node
from controlplane import bulk
from controlplane.prepared import Keys, Param, Prepared
from events.models import Event
from events.services import record_events
from scheduler.topology import HOSTNAME
from workloads import checkpoints, live, parking, pods, slicing
from workloads.history import admitted_events, workload_event_row
from workloads.manifests.configuration import default_configuration
from workloads.models import Configuration, KubeObject, Pod, Slice, Workload
from workloads.snapshot import affinity, cluster_nodes, configuration, from_db, toleration

TRAINING_KINDS = ("Job", "JobSet")
CATCH_UP_CHECKPOINTS = 10
"""The most checkpoints one round records for a job; older ones are skipped."""


def simulate_round(cluster: Cluster, now: datetime, *, first: bool = True) -> bool:
    """One round of the simulated cluster at `now`. Training progresses with the clock alone:
    after the first round at an instant, only jobs that started this round have steps to take."""
    with transaction.atomic(), live.pod_changes(cluster, now):
        # Most rounds find nothing to do: one query says which steps have anything, and the
        # others are skipped. A step also runs when an earlier step of this round may have
        # given it something (it then looks for itself), so the outcome is the same.
        due = _due(cluster, now)
        stopped = due.evicted and stop_evicted(cluster, now)
        changed = stopped
        if due.activating:
            changed |= slicing.activate(cluster, now)
        promoted = due.reserved and _promote_checked(cluster, now)  # starts their pods
        changed |= promoted
        bound = (due.unbound or promoted) and _bind_pods(cluster, now)
        changed |= bound
        became_ready = (due.becoming_ready or bound) and _ready_pods(cluster, now)
        flipped = (due.flipping or promoted or became_ready) and _track_pods_ready(cluster, now)
        changed |= flipped
        # Admitted or no longer ready this round: a deadline `due` did not see.
        if due.overdue or promoted or flipped:
            changed |= _pods_ready_timeouts(cluster, now, due.wait_for_pods_ready)
        if due.backoff_over or stopped:
            changed |= _end_backoff(cluster, now)
        # Training starts when a job's last pod becomes ready, and only then.
        if became_ready:
            changed |= _start_training(cluster)
        if (first and due.training) or became_ready:
            changed |= _progress_training(cluster, now)
        changed |= became_ready
    return changed


@dataclass(frozen=True)
class _Due:
    """What the steps of a round would find as it begins (`_due`)."""

    wait_for_pods_ready: Mapping[str, Any]
    """The Configuration's."""
    overdue: bool
    """Admitted workloads past their waitForPodsReady deadline (`_pods_ready_overdue`)."""
    evicted: bool
    activating: bool
    """Slices whose activation time has come."""
    reserved: bool
    unbound: bool
    """Pending pods without a node, and a ready node."""
    becoming_ready: bool
    """Bound pods whose startup is over."""
    flipping: bool
    """Admitted workloads whose PodsReady condition no longer says whether all pods are."""
    backoff_over: bool
    training: bool


def _due(cluster: Cluster, now: datetime) -> _Due:
    """What each step would find, in one statement: the steps' own queries cost several times
    more to build than to run, and mostly find nothing. Raw SQL, as the ORM's would be."""
    quote = connection.ops.quote_name
    workloads, pods_, nodes, slices, owners, configurations = (
        quote(m._meta.db_table) for m in (Workload, Pod, Node, Slice, KubeObject, Configuration)
    )
    at = Pod._meta.get_field("ready_at").get_db_prep_value(now, connection)
    pk, admitted, pending = cluster.pk, Workload.Phase.ADMITTED, Workload.Phase.PENDING
    pod_of_w = f"SELECT 1 FROM {pods_} p WHERE p.workload_id = w.id"
    not_ready = f"{pod_of_w} AND NOT p.ready"
    in_training = ", ".join(["%s"] * len(TRAINING_KINDS))
    # As `_waiting_for_pods_ready`.
    waiting = (
        "w.cluster_id = %s AND w.phase = %s AND NOT w.evicting AND NOT w.pods_ready"
        " AND w.admitted_at IS NOT NULL"
    )
    exists: list[tuple[str, list[Any]]] = [
        # Compared, not tested, so that SQLite searches the (cluster, evicting) index; the
        # others test it, so that it prefers (cluster, phase).
        (f"{workloads} w WHERE w.cluster_id = %s AND w.evicting = %s", [pk, True]),
        (
            f"{slices} s WHERE s.cluster_id = %s AND s.state = %s AND s.activates_at <= %s",
            [pk, Slice.State.ACTIVATING, at],
        ),
        (
            f"{workloads} w WHERE w.cluster_id = %s AND w.phase = %s",
            [pk, Workload.Phase.QUOTA_RESERVED],
        ),
        (
            f"{pods_} p WHERE p.cluster_id = %s AND p.phase = %s AND p.node_id IS NULL"
            f" AND EXISTS (SELECT 1 FROM {nodes} n WHERE n.cluster_id = %s AND n.ready)",
            [pk, Pod.Phase.PENDING, pk],
        ),
        (
            f"{pods_} p WHERE p.cluster_id = %s AND p.phase = %s AND p.node_id IS NOT NULL"
            " AND p.ready_at <= %s",
            [pk, Pod.Phase.PENDING, at],
        ),
        # `_track_pods_ready` flips pods_ready where it differs from "has pods, all ready":
        # true and "one not ready, or no pods", false and "none not ready, and some". Tested
        # apart, so that each row looks up its pods once or twice, as its flag needs.
        (
            f"{workloads} w WHERE w.cluster_id = %s AND w.phase = %s AND NOT w.evicting"
            f" AND (w.pods_ready AND (EXISTS ({not_ready}) OR NOT EXISTS ({pod_of_w}))"
            f" OR NOT w.pods_ready AND NOT EXISTS ({not_ready}) AND EXISTS ({pod_of_w}))",
            [pk, admitted],
        ),
        (
            f"{workloads} w WHERE w.cluster_id = %s AND w.phase = %s AND NOT w.evicting"
            " AND w.requeue_at <= %s",
            [pk, pending, at],
        ),
        (
            f"{workloads} w JOIN {owners} o ON o.id = w.owner_id WHERE w.cluster_id = %s"
            " AND w.phase = %s AND w.training_started_at IS NOT NULL"
            f" AND o.kind IN ({in_training})",
            [pk, admitted, *TRAINING_KINDS],
        ),
    ]
    values: list[tuple[str, list[Any]]] = [
        (f"SELECT c.spec FROM {configurations} c WHERE c.cluster_id = %s", [pk]),  # one at most
        (
            f"SELECT MIN(w.admitted_at) FROM {workloads} w WHERE {waiting}"
            " AND w.pods_ready_changed_at IS NULL",
            [pk, admitted],
        ),
        (
            f"SELECT MIN(w.pods_ready_changed_at) FROM {workloads} w WHERE {waiting}",
            [pk, admitted],
        ),
    ]
    columns = [f"EXISTS (SELECT 1 FROM {where})" for where, _ in exists]
    columns += [f"({query})" for query, _ in values]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(columns)}",
            [param for _, params in exists + values for param in params],
        )
        *found, spec, first_admitted, first_not_ready = cursor.fetchone()
    spec = from_db(Configuration._meta.get_field("spec"), spec)
    wait = (spec if spec is not None else default_configuration())["wait_for_pods_ready"]
    # The earliest starts against their deadlines: whether `_pods_ready_overdue` finds any.
    first_admitted = from_db(Workload._meta.get_field("admitted_at"), first_admitted)
    first_not_ready = from_db(Workload._meta.get_field("pods_ready_changed_at"), first_not_ready)
    timeout, recovery = wait["timeout"], wait["recovery_timeout"]
    overdue = wait["enable"] and (
        (first_admitted is not None and first_admitted <= now - timedelta(seconds=timeout))
        or (
            bool(recovery)
            and first_not_ready is not None
            and first_not_ready <= now - timedelta(seconds=recovery)
        )
    )
    return _Due(wait, overdue, *(bool(flag) for flag in found))


def _sim(row: Workload) -> dict[str, Any]:
    simulation: dict[str, Any] = row.owner.simulation
    return simulation


def _loaded(rows: QuerySet[Workload]) -> list[Workload]:
    """The rows with their owner and cluster. Most rounds find none, and asking whether there
    are any costs a fraction of building the joined query."""
    if not rows.exists():
        return []
    return list(rows.select_related("owner", "cluster"))


def current_step(row: Workload, now: datetime) -> int:
    """Training steps completed by `now` (the checkpoint it resumed from included)."""
    if row.training_started_at is None:
        return row.start_step
    sim = _sim(row)
    done = row.start_step + int((now - row.training_started_at).total_seconds() // sim["step_time"])
    return min(done, sim["total_steps"]) if sim["total_steps"] else done


_EVICTED_FIELDS = [
    "phase",
    "admission",
    "evicting",
    "quota_reserved_at",
    "admitted_at",
    "training_started_at",
    "pods_ready",
    "pods_ready_changed_at",
    "steps_lost",
    "queued_at",
]
_evicted_values = attrgetter(*_EVICTED_FIELDS)


def stop_evicted(cluster: Cluster, now: datetime) -> bool:
    """Evicted workloads stop (sim: at once), release quota and go back to their queue."""
    rows = _loaded(Workload.objects.filter(cluster=cluster, evicting=True))
    if not rows:
        return False
    slicing.release(rows, now)
    live.touch(row.owner_id for row in rows)
    pods.stop(rows)
    trained = [row for row in rows if row.training_started_at is not None]
    latest = checkpoints.latest_steps(row.owner_id for row in trained)
    lost = {row.pk: max(0, current_step(row, now) - latest.get(row.owner_id, 0)) for row in trained}
    events = []
    for row in rows:
        steps = lost.get(row.pk, 0)
        row.phase = Workload.Phase.PENDING
        row.admission = None
        row.evicting = False
        row.quota_reserved_at = row.admitted_at = row.training_started_at = None
        row.pods_ready, row.pods_ready_changed_at = False, None
        row.steps_lost += steps
        if pods.is_pod_owned(row.owner):
            row.queued_at = now  # a recreated pod is a new workload in Kueue's queue order
        events.append(
            workload_event_row(
                "workload.evicted",
                row,
                now,
                f"evicted ({row.eviction_reason}), quota released; "
                f"{steps} training steps lost since the last checkpoint",
                reason=row.eviction_reason,
                steps_lost=steps,
            )
        )
        # In its back-off, or deactivated, it is not queued (yet): _end_backoff requeues it.
        if row.active and row.requeue_at is None:
            events.append(_requeued_event(row, now))
    bulk.update_rows(
        Workload, "pk", _EVICTED_FIELDS, [(row.pk, *_evicted_values(row)) for row in rows]
    )
    record_events(events)
    unpark(cluster, now)
    return True


def _requeued_event(row: Workload, now: datetime) -> Event:
    return workload_event_row(
        "workload.requeued", row, now, f"requeued in LocalQueue {row.queue_name}"
    )


def _track_pods_ready(cluster: Cluster, now: datetime) -> bool:
    """Kueue's PodsReady condition: true once all the admitted workload's pods are ready,
    false again (waiting for recovery) when one of them stops being ready."""
    rows = (
        Workload.objects.filter(cluster=cluster, phase=Workload.Phase.ADMITTED, evicting=False)
        .annotate(pod_count=Count("pods"), ready_count=Count("pods", filter=Q(pods__ready=True)))
        .values_list("pk", "pods_ready", "pod_count", "ready_count")
    )
    flipped: dict[bool, list[int]] = defaultdict(list)
    for pk, ready, count, ready_count in rows:
        all_ready = count > 0 and ready_count == count
        if all_ready != ready:
            flipped[all_ready].append(pk)
    for all_ready, pks in flipped.items():
        bulk.update_keys(Workload, "pk", pks, pods_ready=all_ready, pods_ready_changed_at=now)
    return bool(flipped)


def _waiting_for_pods_ready(cluster: Cluster) -> QuerySet[Workload]:
    """Admitted workloads whose pods are not (or no longer) all ready: the ones with a
    waitForPodsReady deadline (Kueue `WorkloadReconciler.admittedNotReadyWorkload`): `timeout`
    from admission until the pods are first ready, `recoveryTimeout` ("0s": none) after they
    stop being ready."""
    return Workload.objects.filter(
        cluster=cluster,
        phase=Workload.Phase.ADMITTED,
        evicting=False,
        pods_ready=False,
        admitted_at__isnull=False,
    )


def _pods_ready_overdue(wait: Mapping[str, Any], now: datetime) -> Q:
    """Which of `_waiting_for_pods_ready` are past their deadline at `now`: a filter, so that
    a round reads only those."""
    overdue = Q(
        pods_ready_changed_at__isnull=True,
        admitted_at__lte=now - timedelta(seconds=wait["timeout"]),
    )
    if wait["recovery_timeout"]:
        overdue |= Q(pods_ready_changed_at__lte=now - timedelta(seconds=wait["recovery_timeout"]))
    return overdue


def backoff_seconds(count: int, base: int, cap: int) -> int:
    """Kueue `workload.UpdateRequeueState`: base * 2^(count-1), at most `cap`. Kueue adds a
    tiny random jitter (0.01%); the simulator adds none, to stay deterministic."""
    return min(base << (count - 1), cap)


def _pods_ready_timeouts(cluster: Cluster, now: datetime, wait: Mapping[str, Any]) -> bool:
    """Admitted workloads whose pods missed their deadline are evicted (PodsReadyTimeout) with
    a requeuing back-off, or deactivated past `backoffLimitCount` (Kueue `reconcileNotReadyTimeout`,
    `triggerDeactivation`). `wait`: the Configuration's waitForPodsReady."""
    if not wait["enable"]:
        return False
    strategy = wait["requeuing_strategy"]
    limit = strategy["backoff_limit_count"]
    rows = _loaded(_waiting_for_pods_ready(cluster).filter(_pods_ready_overdue(wait, now)))
    for row in rows:
        row.evicting = True
        if limit is not None and row.requeue_count + 1 > limit:
            # Deactivated: spec.active=false, evicted with reason Deactivated, requeueState gone.
            row.active, row.requeue_count, row.requeue_at = False, 0, None
            row.eviction_reason = "Deactivated"
            row.pending_reason = "RequeuingLimitExceeded"
            row.pending_message = (
                "The workload is deactivated due to exceeding the maximum number of "
                "re-queuing retries"
            )
        else:
            row.requeue_count += 1
            wait_for = backoff_seconds(
                row.requeue_count,
                strategy["backoff_base_seconds"],
                strategy["backoff_max_seconds"],
            )
            row.requeue_at = now + timedelta(seconds=wait_for)
            row.eviction_reason = "PodsReadyTimeout"
            row.pending_reason = "PodsReadyTimeout"
            row.pending_message = f"Exceeded the PodsReady timeout {row.namespace}/{row.name}"
            if strategy["timestamp"] == "Eviction":
                row.queued_at = now  # Kueue `GetQueueOrderTimestamp`: the eviction time
        row.save()
    return bool(rows)


def _end_backoff(cluster: Cluster, now: datetime) -> bool:
    """Back-off over: the workload is queued again (Kueue: Requeued=True, BackoffFinished)."""
    rows = _loaded(
        Workload.objects.filter(
            cluster=cluster, phase=Workload.Phase.PENDING, evicting=False, requeue_at__lte=now
        )
    )
    bulk.update_keys(
        Workload,
        "pk",
        [row.pk for row in rows],
        requeue_at=None,
        pending_reason="",
        pending_message="",
    )
    record_events([_requeued_event(row, now) for row in rows])
    return bool(rows)


def unpark(cluster: Cluster, at: datetime) -> None:
    """Capacity was released at `at`: Kueue moves inadmissible workloads back to their queues
    a batch period later (workloads/parking.py)."""
    parking.release(cluster.pk, at)


def _promote_checked(cluster: Cluster, now: datetime) -> bool:
    """Admission checks: the slice controller's once its slices are ACTIVE, the other
    simulated controllers' at once."""
    reserved = _loaded(
        Workload.objects.filter(cluster=cluster, phase=Workload.Phase.QUOTA_RESERVED)
    )
    rows, created = slicing.checks_ready(cluster, reserved, now)
    events = []
    for row in rows:
        message = f"admitted by ClusterQueue {row.cluster_queue_name}: admission checks ready"
        events += admitted_events(row, now, message)
    bulk.update_rows(
        Workload, "pk", ["phase", "admitted_at"], [(r.pk, r.phase, r.admitted_at) for r in rows]
    )
    record_events(events)
    pods.start(rows, now)
    return bool(rows) or created


# The simulated cluster's reads at every round, built once (controlplane/prepared.py).
# Tuples, not model instances (thousands a round), and the scheduling fields as text: a job's
# pods mostly share theirs, decoded once (`_pods`).
_UNBOUND = Prepared(
    lambda: (
        Pod.objects.filter(cluster_id=Param("cluster"), phase=Pod.Phase.PENDING, node__isnull=True)
        .order_by("created_at", "name")
        .values_list(
            "pk", "name", "owner_id", Cast("scheduling", TextField()), "owner__simulation__startup"
        )
    )
)


def _usage(node_ids: Keys | None) -> QuerySet[Any, Any]:
    # Unordered: sorting by name would make SQLite walk every pod the cluster ever had.
    bound = Pod.objects.filter(
        cluster_id=Param("cluster"), phase__in=live.HOLDING_NODE, node__isnull=False
    ).order_by()
    if node_ids is not None:
        bound = bound.filter(node_id__in=node_ids)
    # Counted per node and distinct requests, in the database: a node's pods mostly ask alike,
    # so a few rows (and decodings) stand for thousands of pods.
    return (
        bound.values("node__name", requests=KT("scheduling__requests"))
        .annotate(count=Count("pk"))
        .values_list("node__name", "requests", "count")
    )


_USAGE = Prepared(lambda: _usage(None))
_USAGE_ON_NODES = Prepared(lambda: _usage(Keys("nodes")))
_READY_AT = Pod._meta.get_field("ready_at")


def _bind_pods(cluster: Cluster, now: datetime) -> bool:
    fleet = cluster_nodes(cluster.pk)
    nodes = [n for n in fleet.nodes if n.ready]
    if not nodes:
        return False
    waiting = _UNBOUND.rows(cluster=cluster.pk)
    if not waiting:
        return False
    # Keyed by primary key: names repeat across namespaces (a LeaderWorkerSet's pods are named
    # after it and their index alone).
    candidates = _pods((str(pk), text) for pk, _, _, text, _ in waiting)
    nodes = _reachable(nodes, candidates)
    owners = exclusive_owners(cluster) if any(p.exclusive for p in candidates) else None
    bindings = scheduler.place(nodes, _node_usage(cluster, nodes, fleet.ids), candidates, owners)
    # Each distinct startup time's instant once (most pods share a few).
    ready_at = {
        startup: now + timedelta(seconds=30 if startup is None else startup)
        for startup in {startup for *_, startup in waiting}
    }
    # One statement for all of them (not one per node and startup time: hundreds a round).
    bound: list[tuple[int, int, datetime, datetime]] = []  # pod, node, bound_at, ready_at
    touched: set[int] = set()
    for pk, _, owner_id, _, startup in waiting:
        target = bindings.get(str(pk))
        if target is not None:
            bound.append((pk, fleet.ids[target], now, ready_at[startup]))
            touched.add(owner_id)
    live.touch(touched)
    bulk.update_rows(Pod, "pk", ["node", "bound_at", "ready_at"], bound)
    return bool(bound)


def unplaced(cluster: Cluster, waiting: Sequence[Pod]) -> list[dict[str, Any]]:
    """Why kube-scheduler leaves these pods unbound now, as `_bind_pods` would filter the
    nodes: [{"why": its FailedScheduling message, "pods": names}], one per message."""
    waiting = [p for p in waiting if p.phase == Pod.Phase.PENDING and p.node_id is None]
    if not waiting:
        return []
    fleet = cluster_nodes(cluster.pk)
    candidates = [_pod(p.name, p.scheduling) for p in waiting]
    owners = exclusive_owners(cluster) if any(p.exclusive for p in candidates) else None
    used = _node_usage(cluster, fleet.nodes, fleet.ids)
    by_reason: dict[str, list[str]] = defaultdict(list)
    for pod in candidates:
        why = scheduler.why_unplaced(pod, fleet.nodes, used, owners)
        if why is not None:
            by_reason[why].append(pod.key)
    return [{"why": why, "pods": sorted(names)} for why, names in by_reason.items()]


def _reachable(nodes: list[scheduler.Node], pods: Sequence[scheduler.Pod]) -> list[scheduler.Node]:
    """The nodes any of the pods could go to. When every pod's node selector names a host (a
    TAS assignment pins each pod to its leaf domain), only those hosts: no other node matches
    any of the pods, so placing over them alone binds exactly as placing over all."""
    hosts = {p.node_selector.get(HOSTNAME) for p in pods}
    if None in hosts:
        return nodes
    return [n for n in nodes if n.labels.get(HOSTNAME) in hosts]


def _node_usage(
    cluster: Cluster, nodes: Sequence[scheduler.Node], ids: Mapping[str, int]
) -> dict[str, dict[str, int]]:
    """Node name -> what the pods bound to it take (`scheduler.node_charge`)."""
    if len(nodes) < len(ids):
        alike = _USAGE_ON_NODES.rows(cluster=cluster.pk, nodes=[ids[n.name] for n in nodes])
    else:
        alike = _USAGE.rows(cluster=cluster.pk)
    used: dict[str, dict[str, int]] = defaultdict(dict)
    for name, text, count in alike:
        node_used = used[name]
        for resource, amount in scheduler.node_charge(json.loads(text)).items():
            node_used[resource] = node_used.get(resource, 0) + amount * count
    return used


def _pods(rows: Iterable[tuple[str, str]]) -> list[scheduler.Pod]:
    """Pods from (name, scheduling fields as JSON text) rows; each distinct text decoded once."""
    shapes: dict[str, dict[str, Any]] = {}
    candidates = []
    for name, text in rows:
        shape = shapes.get(text)
        if shape is None:
            shape = shapes[text] = _shape(json.loads(text))
        candidates.append(scheduler.Pod(key=name, **shape))
    return candidates


def _pod(name: str, spec: Mapping[str, Any]) -> scheduler.Pod:
    return scheduler.Pod(key=name, **_shape(spec))


def _shape(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A pod's scheduler fields but its name, from its scheduling fields."""
    return {
        "requests": spec["requests"],
        "node_selector": spec.get("node_selector") or {},
        "required_affinity": affinity(spec.get("required_node_affinity") or ()),
        "tolerations": tuple(toleration(t) for t in spec.get("tolerations") or ()),
        "exclusive": _exclusive(spec.get("exclusive")),
    }


def _exclusive(value: Mapping[str, str] | None) -> tuple[str, str] | None:
    return (value["key"], value["group"]) if value else None


def exclusive_owners(cluster: Cluster) -> dict[tuple[str, str], str]:
    """The domains that bound pods of exclusively placed groups hold."""
    owners = {}
    bound = Pod.objects.filter(
        cluster=cluster,
        phase__in=live.HOLDING_NODE,
        node__isnull=False,
        scheduling__has_key="exclusive",
    ).order_by()  # sorted here: in SQL, by name, SQLite would walk all the cluster's pods
    rows = sorted(bound.values_list("namespace", "name", "scheduling", "node__labels"))
    for _namespace, _name, scheduling, labels in rows:
        key, group = scheduling["exclusive"]["key"], scheduling["exclusive"]["group"]
        if key in labels:
            owners[(key, labels[key])] = group
    return owners


def _ready_pods(cluster: Cluster, now: datetime) -> bool:
    """Bound pods whose startup is over become ready. In one statement, so that a pod ended
    meanwhile (a finish takes no admission lock) no longer matches; in SQL, as `_due`."""
    table = connection.ops.quote_name(Pod._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET phase = %s, ready = %s WHERE cluster_id = %s AND phase = %s"  # noqa: S608
            " AND node_id IS NOT NULL AND ready_at <= %s RETURNING owner_id",
            [
                Pod.Phase.RUNNING,
                True,
                cluster.pk,
                Pod.Phase.PENDING,
                _READY_AT.get_db_prep_value(now, connection),
            ],
        )
        owners = {owner_id for (owner_id,) in cursor.fetchall()}
    live.touch(owners)
    return bool(owners)


def _training_rows(cluster: Cluster, *, started: bool) -> list[Workload]:
    """Admitted training workloads, with their latest checkpoint step (`last_checkpoint`)."""
    rows = list(
        Workload.objects.filter(
            cluster=cluster,
            phase=Workload.Phase.ADMITTED,
            owner__kind__in=TRAINING_KINDS,
            training_started_at__isnull=not started,
        )
        .select_related("owner", "cluster")
        # Read at every settle, for every running job: only what the clock and the events read
        # (a finishing job loads the rest).
        .only(
            *("name", "namespace", "owner", "cluster", "phase", "training_started_at"),
            *("start_step", "owner__kind", "owner__namespace", "owner__name"),
            *("owner__simulation", "cluster__name"),
        )
    )
    if rows:
        # A second query only when there are rows: grouping every column is costly to build.
        latest = checkpoints.latest_steps({row.owner_id for row in rows})
        for row in rows:
            row.last_checkpoint = latest.get(row.owner_id)  # type: ignore[attr-defined]
    return rows


def _last_checkpoint(row: Workload) -> int:
    """The step annotated by `_training_rows` (0 before any checkpoint)."""
    return int(getattr(row, "last_checkpoint", None) or 0)


def _progress_training(cluster: Cluster, now: datetime) -> bool:
    changed = False
    done = []
    running: list[Workload] = []
    steps: dict[int, int] = {}
    saved: set[int] = set()
    for row in _training_rows(cluster, started=True):
        if _checkpoint(row, now):
            changed = True
            saved.add(row.pk)
        sim = _sim(row)
        steps[row.pk] = current_step(row, now)
        if sim["total_steps"] and steps[row.pk] >= sim["total_steps"]:
            done.append(row)
        else:
            running.append(row)
    live.report_progress(cluster, running, steps, saved, now)
    for row in done:
        finish([row], _time_of_step(row, _sim(row)["total_steps"]), Workload.Phase.FINISHED)
    return changed or bool(done)


def _start_training(cluster: Cluster) -> bool:
    """Steps start once every pod of the job is ready."""
    waiting = (
        Workload.objects.filter(
            cluster=cluster,
            phase=Workload.Phase.ADMITTED,
            owner__kind__in=TRAINING_KINDS,
            training_started_at__isnull=True,
        )
        .annotate(
            pod_count=Count("pods"),
            ready_count=Count("pods", filter=Q(pods__ready=True)),
            last_ready=Max("pods__ready_at"),
        )
        .filter(pod_count__gt=0, ready_count=F("pod_count"))
    )
    started = list(waiting.values_list("pk", "last_ready"))
    bulk.update_rows(Workload, "pk", ["training_started_at"], started)
    return bool(started)


def _time_of_step(row: Workload, step: int) -> datetime:
    assert row.training_started_at is not None
    seconds = (step - row.start_step) * _sim(row)["step_time"]
    return row.training_started_at + timedelta(seconds=seconds)


def _checkpoint(row: Workload, now: datetime) -> bool:
    every = _sim(row)["checkpoint_every"]
    if not every:
        return False
    last = max(_last_checkpoint(row), row.start_step)
    reached = current_step(row, now)
    # Catching up after a long pause (a live cluster nobody ticked) records only the latest
    # few: a resume reads the newest, and millions of rows would hold the admission lock.
    steps = range((last // every + 1) * every, reached + 1, every)[-CATCH_UP_CHECKPOINTS:]
    for step in steps:
        try:
            checkpoints.record(row, step, _time_of_step(row, step))
        except checkpoints.NotNewer:
            break  # the job reported a later one itself (the API) since `last` was read
    return bool(steps)


def finish(rows: Sequence[Workload], at: datetime, phase: str) -> None:
    """Workloads ended by themselves or by the user; their quota returns to the queues."""
    if not rows:
        return
    pod_phase = Pod.Phase.SUCCEEDED if phase == Workload.Phase.FINISHED else Pod.Phase.FAILED
    kind = "workload.finished" if phase == Workload.Phase.FINISHED else "workload.failed"
    ids = [row.pk for row in rows]
    live.touch(row.owner_id for row in rows)
    slicing.release(rows, at)
    bulk.update_keys(Workload, "pk", ids, phase=phase, finished_at=at, evicting=False)
    bulk.update_keys(Pod, "workload", ids, phase=pod_phase, node=None, ready=False)
    record_events(
        [workload_event_row(kind, row, at, f"{row.owner.key} {phase.lower()}") for row in rows]
    )
    unpark(rows[0].cluster, at)


def _pods_ready_times(cluster: Cluster) -> list[datetime]:
    """waitForPodsReady deadlines and back-off ends, so that `advance` stops at them."""
    wait = configuration(cluster)["wait_for_pods_ready"]
    requeue = Workload.objects.filter(
        cluster=cluster, phase=Workload.Phase.PENDING, requeue_at__isnull=False
    ).aggregate(at=Min("requeue_at"))["at"]
    times = [requeue] if requeue is not None else []
    if wait["enable"]:
        # The earliest deadline of each kind: the earliest start plus its timeout.
        earliest = _waiting_for_pods_ready(cluster).aggregate(
            admitted=Min("admitted_at", filter=Q(pods_ready_changed_at__isnull=True)),
            not_ready=Min("pods_ready_changed_at"),
        )
        if earliest["admitted"] is not None:
            times.append(earliest["admitted"] + timedelta(seconds=wait["timeout"]))
        if earliest["not_ready"] is not None and wait["recovery_timeout"]:
            times.append(earliest["not_ready"] + timedelta(seconds=wait["recovery_timeout"]))
    return times


def next_event_at(cluster: Cluster) -> datetime | None:
    """When the simulated world next changes by itself."""
    ready_at = Pod.objects.filter(
        cluster=cluster, phase=Pod.Phase.PENDING, node__isnull=False
    ).aggregate(at=Min("ready_at"))["at"]
    times = [ready_at] if ready_at is not None else []
    for row in _training_rows(cluster, started=True):
        sim = _sim(row)
        candidates = []
        if sim["checkpoint_every"]:
            done = max(_last_checkpoint(row), row.start_step)
            candidates.append((done // sim["checkpoint_every"] + 1) * sim["checkpoint_every"])
        if sim["total_steps"]:
            candidates.append(sim["total_steps"])
        if candidates:
            times.append(_time_of_step(row, min(candidates)))
    times += _pods_ready_times(cluster)
    for at in (slicing.next_activation(cluster), parking.next_requeue(cluster.pk)):
        if at is not None:
            times.append(at)
    return min(times) if times else None
