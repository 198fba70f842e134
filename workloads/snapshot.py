"""The only translator from ORM rows to the scheduler's dataclasses; a fixed number of queries."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache, partial
from typing import Any, Generic, ParamSpec, TypeVar

from django.conf import settings
from django.db import connection
from django.db.models import (
    BooleanField,
    DateTimeField,
    ExpressionWrapper,
    F,
    Field,
    Model,
    Q,
    QuerySet,
    TextField,
    Value,
    Window,
)
from django.db.models.base import ModelState
from django.db.models.functions import Cast, Coalesce, Collate, RowNumber

import scheduler as s
from clusters.models import Cluster, ClusterStamp, Node, NodeGeneration
from controlplane import bulk
from scheduler.fairsharing import local_queue_usage
from scheduler.model import AdmissionFairSharing, NodeSelectorTerm, SchedulingConfig
from scheduler.topology import request_from_annotations
from workloads import live, parking
from workloads.manifests.clusterqueues import ClusterQueueSpec, CohortSpec
from workloads.manifests.configuration import default_configuration
from workloads.models import (
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    Configuration,
    KubeObject,
    LocalQueue,
    Pod,
    QueueGeneration,
    QueueObject,
    ResourceFlavor,
    Topology,
    Workload,
)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    cluster: Cluster
    snapshot: s.Snapshot
    ids: dict[str, int]
    """Workload primary keys by scheduler key."""
    pending_state: dict[str, tuple[str, str, bool]]
    """Stored (reason, message, parked) of pending workloads, to write only what changed."""
    held: list[s.Pending]
    """Pending workloads of stopped or missing LocalQueues: never given to the scheduler."""
    releases: int
    """The cluster's count of capacity releases it was read at (workloads/parking.py)."""
    flavor_specs: Mapping[str, str]
    """The ResourceFlavors' specs as JSON text, by name (for `pods.start`)."""

    def fetch(self, keys: Iterable[str]) -> dict[str, Workload]:
        """The rows behind some scheduler keys, owners loaded, in one query."""
        wanted = {self.ids[k]: k for k in keys}
        # Not the owner's manifest: admission never reads it, and decoding it was a fifth of
        # this query's time on a deep queue.
        rows = Workload.objects.filter(pk__in=wanted).select_related("owner")
        rows = rows.defer("owner__manifest")
        result = {}
        for row in rows:
            row.cluster = self.cluster
            row.owner.cluster = self.cluster
            result[wanted[row.pk]] = row
        return result

    def fetch_to_write(self, keys: Iterable[str]) -> dict[str, Workload]:
        """`fetch` for the admission writer, which reads a few fields of each of thousands of
        rows: `rows_to_write`."""
        wanted = {self.ids[k]: k for k in keys}
        return {wanted[pk]: row for pk, row in rows_to_write(self.cluster, wanted).items()}

    def pending_changes(
        self, pending: Iterable[s.Pending]
    ) -> tuple[dict[int, tuple[str, str, bool]], set[int]]:
        """The (reason, message, parked) of the pending workloads whose stored state differs,
        by primary key, and those of them whose parking alone changed."""
        changes, parking_only = {}, set()
        for decision in pending:
            state = (decision.reason.value, decision.message, decision.parked)
            stored = self.pending_state.get(decision.workload)
            if stored != state:
                pk = self.ids[decision.workload]
                changes[pk] = state
                if stored is not None and stored[:2] == state[:2]:
                    parking_only.add(pk)
        return changes, parking_only


Mate = tuple[int, tuple[str, str, bool], tuple[str, str]]
"""A workload parked beside a run's decision: its primary key, the (reason, message, parked) to
write, and the (reason, message) it holds."""
WaitingRows = Callable[[Cluster, Collection[tuple[str, str]], int], list["WorkloadRow"]]


def parked_mates(
    snap: ClusterSnapshot, queues: QueueSpecs, pending: Iterable[s.Pending], rows: WaitingRows
) -> list[Mate]:
    """Kueue's SchedulingEquivalenceHashing parks, with a workload found inadmissible, every
    pending workload of its ClusterQueue of the same shape. The scheduler parks those of the
    run's window of heads (`cycle._requeue`); these are the others, further back in the
    ClusterQueue's LocalQueues, read with `rows` (`query_waiting_rows` or the cache's), which
    later runs would otherwise load and nominate a window at a time for the same answer."""
    parked = {p.workload: p for p in pending if p.parked}
    if not parked:
        return []
    shapes: dict[tuple[str | None, tuple[object, ...]], s.Pending] = {}
    for workload in snap.snapshot.workloads:
        if (found := parked.get(workload.key)) is not None:
            key = (workload.cluster_queue, s.shape_of(workload.priority, workload.pod_sets))
            shapes.setdefault(key, found)
    cluster_queues = {cq for cq, _ in shapes}
    local_queues = [
        lq
        for lq, cq in queues.queue_of.items()
        if cq in cluster_queues and lq not in queues.stopped
    ]
    loaded = set(snap.ids.values())
    # Most of the rows share a few texts, each converted and hashed once.
    row_shapes: dict[tuple[int, str], tuple[object, ...]] = {}
    mates = []
    for row in rows(snap.cluster, local_queues, snap.releases):
        pk, namespace, _, queue, priority, _, text = row[:7]
        if pk in loaded:
            continue
        shape = row_shapes.get((priority, text))
        if shape is None:
            shape = row_shapes[(priority, text)] = s.shape_of(priority, _pod_sets_from_text(text))
        decision = shapes.get((queues.queue_of[(namespace, queue)], shape))
        if decision is not None:
            state = (decision.reason.value, decision.message, True)
            mates.append((pk, state, (row[_REASON], row[_MESSAGE])))
    return mates


_ADMITTED_AT = Workload._meta.get_field("admitted_at")
_QUEUED_AT = Workload._meta.get_field("queued_at")
# The related objects' cache names (`set_cached_value`'s keys).
_CLUSTER = Workload._meta.get_field("cluster").cache_name
_OWNER = Workload._meta.get_field("owner").cache_name
_OWNER_CLUSTER = KubeObject._meta.get_field("cluster").cache_name

M = TypeVar("M", bound=Model)
K = TypeVar("K")  # a value `_KeptWhileStamped` keeps


def rows_to_write(cluster: Cluster, pks: Collection[int]) -> dict[int, Workload]:
    """Workloads of `cluster` by primary key, owners loaded, for a writer that reads a few
    fields of each of thousands (admission, a finish): only those it reads before it sets them
    (those of its events and `pods.start` too) are loaded, the others deferred (read from the
    database if ever used, a query each), and the rows and owners are built without
    `Model.__init__` (`_as_loaded`), which took longer than the query."""
    if not pks:
        return {}
    chosen, param = bulk.key_table(pks, "bigint")
    quote = connection.ops.quote_name
    workloads, owners = quote(Workload._meta.db_table), quote(KubeObject._meta.db_table)
    # In SQL, as `read_rows_by_pk`.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w.id, w.owner_id, w.name, w.namespace, w.replica_index, w.priority, "  # noqa: S608
            "w.admissions, w.phase, w.queued_at, w.admitted_at, CAST(w.pod_sets AS text), "
            f"o.kind, o.namespace, o.name, o.generation FROM {workloads} w "
            f"JOIN {owners} o ON o.id = w.owner_id WHERE w.id IN (SELECT value FROM {chosen})"
            " AND w.cluster_id = %s",
            [param, cluster.pk],
        )
        values = cursor.fetchall()
    db = connection.alias
    # Thousands of workloads share a handful of shapes: each distinct text is decoded once,
    # and the rows of a shape share its `pod_sets` (read only: neither the writer nor
    # `pods.start` changes it).
    shapes: dict[str, Any] = {}
    result = {}
    for (
        pk,
        owner_id,
        name,
        namespace,
        replica_index,
        priority,
        admissions,
        phase,
        queued_at,
        admitted_at,
        text,
        kind,
        owner_namespace,
        owner_name,
        generation,
    ) in values:
        pod_sets = shapes.get(text)
        if pod_sets is None:
            pod_sets = shapes[text] = json.loads(text)
        owner = _as_loaded(
            KubeObject,
            db,
            {_OWNER_CLUSTER: cluster},
            id=owner_id,
            cluster_id=cluster.pk,
            kind=kind,
            namespace=owner_namespace,
            name=owner_name,
            generation=generation,
        )
        result[pk] = _as_loaded(
            Workload,
            db,
            {_CLUSTER: cluster, _OWNER: owner},
            id=pk,
            cluster_id=cluster.pk,
            owner_id=owner_id,
            name=name,
            namespace=namespace,
            replica_index=replica_index,
            priority=priority,
            admissions=admissions,
            phase=phase,
            queued_at=from_db(_QUEUED_AT, queued_at),
            admitted_at=admitted_at and from_db(_ADMITTED_AT, admitted_at),
            pod_sets=pod_sets,
        )
    return result


def _as_loaded(model: type[M], db: str, related: dict[str, Model], **fields: Any) -> M:
    """A row of `model` as a query loads it (`Model.from_db`) with only `fields` (by attname):
    the others are deferred; its `related` objects (by cache name) as `select_related` caches
    them. Without `Model.__init__`, which walks every field of the model and sends `pre_init`
    and `post_init` (nothing listens to them for workloads or their owners): about a tenth of
    its time."""
    row = model.__new__(model)
    row.__dict__.update(fields)
    state = row._state = ModelState()
    state.adding, state.db, state.fields_cache = False, db, related
    return row


def toleration(data: Mapping[str, Any]) -> s.Toleration:
    return s.Toleration(
        key=data.get("key") or "",
        operator=data.get("operator") or "Equal",
        value=data.get("value") or "",
        effect=data.get("effect") or "",
    )


def taint(data: Mapping[str, Any]) -> s.Taint:
    return s.Taint(data["key"], data.get("value") or "", data.get("effect") or "NoSchedule")


def affinity(terms: Iterable[Iterable[Mapping[str, Any]]]) -> tuple[NodeSelectorTerm, ...]:
    return tuple(
        tuple(
            s.NodeSelectorRequirement(r["key"], r["operator"], tuple(r.get("values") or ()))
            for r in term
        )
        for term in terms
    )


def pod_set(data: Mapping[str, Any], count: int | None = None) -> s.PodSet:
    return s.PodSet(
        name=data["name"],
        count=data["count"] if count is None else count,
        requests=data["requests"],
        node_selector=data.get("node_selector") or {},
        required_affinity=affinity(data.get("required_node_affinity") or ()),
        tolerations=tuple(toleration(t) for t in data.get("tolerations") or ()),
        # Validated at apply (manifests.podsets), so this does not raise.
        topology_request=request_from_annotations(data.get("annotations") or {}),
        min_count=data.get("min_count"),
    )


def pod_sets(data: Sequence[Mapping[str, Any]]) -> tuple[s.PodSet, ...]:
    return tuple(pod_set(p) for p in data)


# Thousands of workloads share a handful of shapes and admissions: the snapshot reads their
# JSON as text and converts each distinct text once.
@lru_cache(maxsize=4096)
def _pod_sets_from_text(text: str) -> tuple[s.PodSet, ...]:
    return pod_sets(json.loads(text))


@lru_cache(maxsize=4096)
def _admission_from_text(text: str | None) -> s.Admission | None:
    return admission(json.loads(text)) if text else None


def admission(data: Mapping[str, Any] | None) -> s.Admission | None:
    if not data:
        return None
    return s.Admission(
        data["cluster_queue"],
        tuple(
            s.PodSetAssignment(
                p["name"], p["flavors"], p["count"], topology_assignment(p.get("topology"))
            )
            for p in data["pod_sets"]
        ),
    )


def topology_assignment(data: Mapping[str, Any] | None) -> s.TopologyAssignment | None:
    if not data:
        return None
    return s.TopologyAssignment(
        tuple(data["levels"]),
        tuple(s.DomainAssignment(tuple(d["values"]), d["count"]) for d in data["domains"]),
    )


def topology_json(value: s.TopologyAssignment) -> dict[str, Any]:
    return {
        "levels": list(value.levels),
        "domains": [{"values": list(d.values), "count": d.count} for d in value.domains],
    }


def _assignment_json(p: s.PodSetAssignment) -> dict[str, Any]:
    data: dict[str, Any] = {"name": p.name, "flavors": dict(p.flavors), "count": p.count}
    if p.topology_assignment is not None:
        data["topology"] = topology_json(p.topology_assignment)
    return data


def admission_json(value: s.Admission) -> dict[str, Any]:
    return {
        "cluster_queue": value.cluster_queue,
        "pod_sets": [_assignment_json(p) for p in value.pod_sets],
    }


def cluster_queue(
    name: str, cohort_name: str, stored: Mapping[str, Any], known_checks: Set[str]
) -> s.ClusterQueue:
    spec = ClusterQueueSpec.from_stored(stored)
    checks = spec.check_names
    return s.ClusterQueue(
        name=name,
        resource_groups=spec.resource_groups,
        cohort=cohort_name or None,
        queueing_strategy=spec.queueing_strategy,
        preemption=spec.preemption,
        flavor_fungibility=spec.flavor_fungibility,
        admission_checks=checks,
        # A ClusterQueue naming an AdmissionCheck that does not exist is inactive in Kueue.
        active=spec.stop_policy == "None" and set(checks) <= known_checks,
        fair_weight=spec.weight,
        admission_fair_sharing=spec.admission_mode == "UsageBasedAdmissionFairSharing",
    )


def cohort(name: str, parent_name: str, stored: Mapping[str, Any]) -> s.Cohort:
    spec = CohortSpec.from_stored(stored)
    return s.Cohort(name, parent_name or None, spec.resource_groups, spec.weight)


def resource_flavor(name: str, spec: Mapping[str, Any]) -> s.ResourceFlavor:
    return s.ResourceFlavor(
        name=name,
        node_labels=spec.get("node_labels") or {},
        node_taints=tuple(taint(t) for t in spec.get("node_taints") or ()),
        tolerations=tuple(toleration(t) for t in spec.get("tolerations") or ()),
        topology_name=spec.get("topology_name"),
    )


_WORKLOAD_COLUMNS = (
    "pk",
    "namespace",
    "name",
    "queue_name",
    "priority",
    "queued_at",
    "pod_sets_text",
    "admission_text",
    "quota_reserved_at",
    "evicting",
    "preempting",
    "parked",
    "phase",
    "pending_reason",
    "pending_message",
    "pods_ready",
)


HEADS_PER_QUEUE = 16
"""Pending workloads loaded per LocalQueue, in queue order, by default. A call admits or parks
at most this many per queue; `admission.settle` calls again, with a wider window, while a
window fills up."""


WorkloadRow = tuple[Any, ...]
"""A workload as `read_rows` reads it: the values of `_WORKLOAD_COLUMNS`."""
PARKED = _WORKLOAD_COLUMNS.index("parked")
"""Where a `WorkloadRow` holds `parked`."""
_REASON = _WORKLOAD_COLUMNS.index("pending_reason")
_MESSAGE = _WORKLOAD_COLUMNS.index("pending_message")
_QUEUED_AT_COLUMN = _WORKLOAD_COLUMNS.index("queued_at")
_PHASE = _WORKLOAD_COLUMNS.index("phase")
_Args = ParamSpec("_Args")


def queued_by(
    now: datetime, rows_of: Callable[_Args, list[WorkloadRow]]
) -> Callable[_Args, list[WorkloadRow]]:
    """`rows_of` (`query_active_rows`, `query_waiting_rows` or the admission cache's) without
    the pending workloads queued after `now`: a run at `now` decides on what was queued by
    then. A worker's settle runs its rounds at the instant it began, and submissions committed
    meanwhile were admitted before they were queued, a few at each round, every round a whole
    run; their commits queue the next settle."""

    def rows(*args: _Args.args, **kwargs: _Args.kwargs) -> list[WorkloadRow]:
        return [
            row
            for row in rows_of(*args, **kwargs)
            if row[_QUEUED_AT_COLUMN] <= now or row[_PHASE] != Workload.Phase.PENDING
        ]

    return rows


def read_rows(rows: QuerySet[Workload], parked: parking.Parked, *extra: str) -> list[WorkloadRow]:
    """`_WORKLOAD_COLUMNS` (JSON as text; `parked` as `parked` reads it, in SQL), then the
    `extra` fields, of each row, by primary key."""
    rows = rows.annotate(
        pod_sets_text=Cast("pod_sets", TextField()),
        admission_text=Cast("admission", TextField()),
        parked=Coalesce(ExpressionWrapper(parked.q(), output_field=BooleanField()), Value(False)),
    )
    return list(rows.order_by("pk").values_list(*_WORKLOAD_COLUMNS, *extra))


def read_rows_by_pk(pks: Collection[int], parked: parking.Parked, *extra: str) -> list[WorkloadRow]:
    """`read_rows` of the workloads `pks` (`extra`: their own fields only), in SQL: the
    admission cache reads the rows changed since its last run at every run, and the ORM took
    a millisecond to build that query, ten times what the database took to answer it."""
    keys, param = bulk.key_table(pks, "bigint")
    quote = connection.ops.quote_name
    columns = [*_WORKLOAD_COLUMNS, *extra]
    sql = ", ".join(_SQL.get(name) or quote(_COLUMNS[name]) for name in columns)
    table = quote(Workload._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {sql} FROM {table} WHERE id IN (SELECT value FROM {keys}) ORDER BY id",  # noqa: S608
            [param],
        )
        found = cursor.fetchall()
    # As the ORM reads them: `parked` as `parked` reads it, datetimes aware.
    times = [(i, _DATETIMES[name]) for i, name in enumerate(columns) if name in _DATETIMES]
    rows = []
    for values in found:
        row = list(values)
        row[PARKED] = parked(row[0], row[PARKED])
        for i, column in times:
            if row[i] is not None:
                row[i] = from_db(column, row[i])
        rows.append(tuple(row))
    return rows


def from_db(field: Field[Any, Any], value: Any) -> Any:
    """A value of `field`'s column from a query in SQL, as the ORM reads it (SQLite returns
    datetimes naive, or as text from an expression; every backend returns JSON as text)."""
    column = field.cached_col
    for convert in connection.ops.get_db_converters(column) + field.get_db_converters(connection):
        value = convert(value, column, connection)
    return value


_COLUMNS = {f.name: str(f.column) for f in Workload._meta.concrete_fields}
_COLUMNS["pk"] = next(str(f.column) for f in Workload._meta.concrete_fields if f.primary_key)
# `read_rows`' annotations; `parked` is read as the count it is computed from.
_SQL = {
    "pod_sets_text": "CAST(pod_sets AS text)",
    "admission_text": "CAST(admission AS text)",
    "parked": "parked_release",
}
_DATETIMES = {f.name: f for f in Workload._meta.concrete_fields if isinstance(f, DateTimeField)}


def waiting(parked: parking.Parked) -> Q:
    """Pending workloads in their LocalQueue: not `parked` (inadmissible), not deactivated, not
    in their requeuing back-off (waitForPodsReady)."""
    queued = Q(phase=Workload.Phase.PENDING, active=True, requeue_at__isnull=True)
    return queued & ~parked.q()


def query_active_rows(cluster: Cluster, heads_per_queue: int, releases: int) -> list[WorkloadRow]:
    """Every workload holding quota, and the first pending ones of each LocalQueue, from the
    database, parked or not at the count of capacity releases `releases`. Admission reads the
    same from `admission_cache`, which keeps them between runs."""
    parked = parking.Parked(cluster.pk, releases)
    holding = Workload.objects.filter(cluster=cluster, phase__in=Workload.HOLDING_QUOTA)
    ranked = Workload.objects.filter(waiting(parked), cluster=cluster).annotate(
        queue_rank=Window(
            RowNumber(),
            partition_by=[F("namespace"), F("queue_name")],
            order_by=[
                F("preempting").desc(),
                F("priority").desc(),
                F("queued_at"),
                # Code point order, as the cache sorts, whatever the database's collation.
                Collate(F("name"), "C" if connection.vendor == "postgresql" else "BINARY"),
            ],
        )
    )
    heads = ranked.filter(queue_rank__lte=heads_per_queue).values("pk")
    chosen = Workload.objects.filter(Q(pk__in=holding.values("pk")) | Q(pk__in=heads))
    return read_rows(chosen, parked)


def query_waiting_rows(
    cluster: Cluster, queues: Collection[tuple[str, str]], releases: int
) -> list[WorkloadRow]:
    """Every workload waiting in the LocalQueues `queues` ((namespace, name) each), from the
    database, by primary key: those past the runs' window of heads too. Admission reads the
    same from `admission_cache`."""
    if not queues:
        return []
    parked = parking.Parked(cluster.pk, releases)
    in_queues = Q()
    for namespace, name in queues:
        in_queues |= Q(namespace=namespace, queue_name=name)
    return read_rows(Workload.objects.filter(waiting(parked), in_queues, cluster=cluster), parked)


# Each cluster's conversions of the rows of its recent runs, made under its LocalQueues as they
# are. The admission cache hands over the same rows run after run, so each is converted once;
# a pending row also leaves the runs' window of queue heads when parked and comes back after a
# release, most often within a few dozen runs. Two generations, swept every
# CONVERSIONS_SWEPT_EVERY runs, keep this as large as the rows of the last runs, where an LRU
# kept every row seen, up to its size. By primary key: the cache's rows are the very same
# tuples while unchanged, so a row's identity says its conversion holds, where hashing each
# row's sixteen values, or even taking its LocalQueue apart, cost more.
CONVERSIONS_SWEPT_EVERY = 64
_Queues = tuple[Mapping[tuple[str, str], str], Set[tuple[str, str]]]
_Conversion = tuple[
    WorkloadRow, str, tuple[str, str, bool] | None, s.Pending | None, s.Workload | None
]
"""A row, its key, its stored pending state (if pending), and either why it is held back or
the scheduler's workload."""


@dataclass(slots=True)
class _Conversions:
    queues: _Queues
    """The LocalQueues (ClusterQueue of each, those stopped) they were all made under."""
    recent: dict[int, _Conversion] = field(default_factory=dict)
    """Of every row of the runs since the last sweep."""
    older: dict[int, _Conversion] = field(default_factory=dict)
    """Of the rows of the runs before it, back to the sweep before."""
    runs: int = 0


_converted: dict[int, _Conversions] = {}


def _workloads(
    cluster: Cluster,
    rows: Iterable[WorkloadRow],
    cq_by_queue: Mapping[tuple[str, str], str],
    stopped: Set[tuple[str, str]],
) -> tuple[list[s.Workload], dict[str, int], dict[str, tuple[str, str, bool]], list[s.Pending]]:
    """Scheduler workloads; pending ones of a stopped (stopPolicy) or missing LocalQueue are
    held back until it is started or applied."""
    workloads, ids, pending_state, held = [], {}, {}, []
    queues = (cq_by_queue, stopped)
    kept = _converted.get(cluster.pk)
    if kept is None or kept.queues != queues:
        kept = _converted[cluster.pk] = _Conversions(queues)
    recent, older = kept.recent, kept.older
    for row in rows:
        pk = row[0]
        seen = recent.get(pk)
        if seen is None:
            seen = older.get(pk)
        if seen is None or seen[0] is not row:
            seen = _conversion(row, cq_by_queue, stopped, seen)
        recent[pk] = seen
        _, key, state, hold, workload = seen
        ids[key] = pk
        if state is not None:
            pending_state[key] = state
        if hold is not None:
            held.append(hold)
        elif workload is not None:
            workloads.append(workload)
    kept.runs += 1
    if kept.runs % CONVERSIONS_SWEPT_EVERY == 0:
        kept.older, kept.recent = kept.recent, {}
    return workloads, ids, pending_state, held


def _conversion(
    row: WorkloadRow,
    cq_by_queue: Mapping[tuple[str, str], str],
    stopped: Set[tuple[str, str]],
    last: _Conversion | None,
) -> _Conversion:
    """A row's conversion; `last`'s if the row is as then (the LocalQueues are: `_workloads`
    drops every conversion when they change)."""
    if last is not None and last[0] == row:
        return row, last[1], last[2], last[3], last[4]
    namespace, name, queue = row[1:4]
    parked, phase, reason, message = row[11:15]
    key = f"{namespace}/{name}"
    state = hold = None
    if phase == Workload.Phase.PENDING:
        state = (reason, message, parked)
        if (namespace, queue) in stopped:
            why = f"LocalQueue {queue} is stopped (stopPolicy)"
            hold = s.Pending(key, s.PendingReason.LOCAL_QUEUE_STOPPED, why, False)
        elif (namespace, queue) not in cq_by_queue:
            # Kueue `getQueueBlocker`: accepted, and queued once the LocalQueue exists.
            why = f"LocalQueue {queue} doesn't exist"
            hold = s.Pending(key, s.PendingReason.MISCONFIGURED, why, False)
        if hold is not None:
            return row, key, state, hold, None
    return row, key, state, None, _workload(row, cq_by_queue.get((namespace, queue)))


def _workload(row: WorkloadRow, cluster_queue: str | None) -> s.Workload:
    (_, namespace, name, queue, priority, queued_at, sets, admitted, reserved_at) = row[:9]
    (evicting, preempting, parked, _, _, _, pods_ready) = row[9:16]
    return s.Workload(
        key=f"{namespace}/{name}",
        cluster_queue=cluster_queue,
        local_queue=f"{namespace}/{queue}",
        priority=priority,
        created=queued_at.timestamp(),
        pod_sets=_pod_sets_from_text(sets),
        admission=_admission_from_text(admitted),
        quota_reserved_at=reserved_at.timestamp() if reserved_at else None,
        evicting=evicting,
        preempting=preempting,
        parked=parked,
        pods_ready=pods_ready,
    )


def load(
    cluster: Cluster,
    heads_per_queue: int = HEADS_PER_QUEUE,
    active_rows: Callable[[Cluster, int, int], list[WorkloadRow]] = query_active_rows,
    releases: int | None = None,
    queues: QueueSpecs | None = None,
) -> ClusterSnapshot:
    """Queues, flavors, cohorts, the Configuration (`queue_specs`) and the active workloads of
    a cluster: two queries while the queue objects are as last read, eight when they changed;
    two more (nodes, bound pods) when a ResourceFlavor is topology-aware. Workloads are parked
    or not at the count of capacity releases `releases` (without it, the cluster's count: one
    more query), under the queue objects `queues` (without them, the cluster's)."""
    if releases is None:
        releases = parking.releases(cluster.pk)
    if queues is None:
        queues = queue_specs(cluster)
    workloads, ids, pending_state, held = _workloads(
        cluster, active_rows(cluster, heads_per_queue, releases), queues.queue_of, queues.stopped
    )
    snapshot = s.Snapshot(
        cluster_queues=queues.cluster_queues,
        cohorts=queues.cohorts,
        flavors=queues.flavors,
        workloads=tuple(workloads),
        config=queues.config,
        local_queue_usage=queues.local_queue_usage,
        local_queue_weights=queues.local_queue_weights,
    )
    if queues.topologies is not None:
        snapshot = _with_topology(
            cluster, snapshot, queues.topologies, _tas_workload_ids(workloads, ids)
        )
    return ClusterSnapshot(
        cluster, snapshot, ids, pending_state, held, releases, queues.flavor_specs
    )


@dataclass(frozen=True, slots=True)
class QueueSpecs:
    """What admission reads of a cluster's queue objects, converted for the scheduler."""

    config: SchedulingConfig
    cluster_queues: Mapping[str, s.ClusterQueue]
    cohorts: Mapping[str, s.Cohort]
    flavors: Mapping[str, s.ResourceFlavor]
    flavor_specs: Mapping[str, str]
    """Each ResourceFlavor's spec as stored (JSON text), by name."""
    queue_of: Mapping[tuple[str, str], str]
    """Each LocalQueue's ClusterQueue, by (namespace, name)."""
    stopped: Set[tuple[str, str]]
    """LocalQueues with a stopPolicy."""
    local_queue_usage: Mapping[str, float]
    local_queue_weights: Mapping[str, float]
    topologies: Mapping[str, s.Topology] | None
    """None unless a ResourceFlavor is topology-aware."""


class _KeptWhileStamped(Generic[K]):
    """What a process read and converted of each cluster, kept while the cluster's stamp (a
    `ClusterStamp`, which database triggers renew at every write to what was read, whoever
    writes) is the one read before it. So any process's change shows at the next call, and an
    unchanged cluster costs one small query."""

    def __init__(self, stamps: type[ClusterStamp]) -> None:
        self.stamps = stamps
        self.kept: dict[int, tuple[int | None, K]] = {}

    def get(self, cluster_id: int, read: Callable[[], K], *, reuse: bool = True) -> tuple[K, bool]:
        """The cluster's value, and whether it is the one kept (`reuse`: else read anew)."""
        # Read before the value: a change committed in between shows in the value now, and in
        # the stamp next time, which reads it again. In SQL, as `_specs`: every round asks.
        stamp = _select(self.stamps, cluster_id, "generation", "cluster_id")
        generation = stamp[0][0] if stamp else None
        seen = self.kept.get(cluster_id)
        if reuse and seen is not None and seen[0] == generation:
            return seen[1], True
        value = read()
        self.kept[cluster_id] = (generation, value)
        return value, False

    def forget(self, cluster_id: int) -> None:
        self.kept.pop(cluster_id, None)


_queues_kept: _KeptWhileStamped[QueueSpecs] = _KeptWhileStamped(QueueGeneration)


def queue_specs(cluster: Cluster) -> QueueSpecs:
    """The cluster's queue objects and Configuration as the scheduler reads them.

    Every admission run asks, and they seldom change: the specs this process converted last
    are kept while the cluster's `QueueGeneration` (renewed at every write to its queue
    objects) stays the same, and read again (six queries, seven with a topology-aware flavor)
    when it changed. With the admission cache off they are read every time; with it verified,
    compared with a fresh read."""
    read = partial(_read_queue_specs, cluster)
    specs, kept = _queues_kept.get(cluster.pk, read, reuse=settings.ADMISSION_CACHE)
    if kept and settings.ADMISSION_CACHE_VERIFY and specs != (fresh := read()):
        _queues_kept.forget(cluster.pk)
        raise QueueSpecsDrift(f"cluster {cluster.pk}: kept {specs!r}, read {fresh!r}")
    return specs


def forget_cluster(cluster_id: int) -> None:
    """A deleted cluster's stamp (deleting its queues renewed it), and its specs and nodes
    kept here."""
    QueueGeneration.objects.filter(cluster_id=cluster_id).delete()
    _queues_kept.forget(cluster_id)
    _nodes_kept.forget(cluster_id)


class QueueSpecsDrift(AssertionError):
    """ADMISSION_CACHE_VERIFY: the kept queue specs and the database disagree (a write no
    trigger saw)."""


def _read_queue_specs(cluster: Cluster) -> QueueSpecs:
    config = cluster_scheduling_config(cluster)
    known_checks = frozenset(name for name, _ in _specs(AdmissionCheck, cluster))
    cqs = {
        name: _cluster_queue(name, cohort_name, spec, known_checks)
        for name, cohort_name, spec in _specs(ClusterQueue, cluster, "cohort_name")
    }
    cohorts = {
        name: _cohort(name, parent, spec)
        for name, parent, spec in _specs(Cohort, cluster, "parent_name")
    }
    flavor_specs: dict[str, str] = dict(_specs(ResourceFlavor, cluster))
    flavors = {name: _resource_flavor(name, spec) for name, spec in flavor_specs.items()}
    queue_of, stopped = {}, set()
    lq_usage, lq_weights = {}, {}
    for ns, name, cq, spec, consumed in _local_queues(cluster):
        queue_of[(ns, name)] = cq
        stop_policy, weight = _local_queue_spec(spec)
        if stop_policy != "None":
            stopped.add((ns, name))
        if config.admission_fair_sharing is not None:
            lq_weights[f"{ns}/{name}"] = weight = 1.0 if weight is None else weight
            afs = config.admission_fair_sharing
            lq_usage[f"{ns}/{name}"] = local_queue_usage(json.loads(consumed), weight, afs)
    topologies = None
    if any(f.topology_name for f in flavors.values()):
        topologies = {name: _topology(name, spec) for name, spec in _specs(Topology, cluster)}
    return QueueSpecs(
        config=config,
        cluster_queues=cqs,
        cohorts=cohorts,
        flavors=flavors,
        flavor_specs=flavor_specs,
        queue_of=queue_of,
        stopped=frozenset(stopped),
        local_queue_usage=lq_usage,
        local_queue_weights=lq_weights,
        topologies=topologies,
    )


def _specs(model: type[QueueObject], cluster: Cluster, *fields: str) -> list[tuple[Any, ...]]:
    """Each queue object's name, `fields`, and spec as text (the key of the conversions below),
    by name. In SQL: every admission run reads them, and the ORM took longer to build these
    statements than the database to answer them."""
    columns = ", ".join(connection.ops.quote_name(name) for name in ("name", *fields))
    return _select(model, cluster.pk, f"{columns}, CAST(spec AS text)", "name")


def _local_queues(cluster: Cluster) -> list[tuple[Any, ...]]:
    """Each LocalQueue's namespace, name, ClusterQueue, and spec and consumed resources as
    text, in the model's order. In SQL, as `_specs`."""
    columns = "namespace, name, cluster_queue_name, CAST(spec AS text), "
    columns += "CAST(consumed_resources AS text)"
    return _select(LocalQueue, cluster.pk, columns, "namespace, name")


def _select(model: type[Model], cluster_id: int, columns: str, order: str) -> list[tuple[Any, ...]]:
    """`columns` (SQL) of a cluster's rows of `model`, ordered by `order` (SQL)."""
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM {table} WHERE cluster_id = %s ORDER BY {order}",  # noqa: S608
            [cluster_id],
        )
        return list(cursor.fetchall())


@lru_cache(maxsize=1024)
def _local_queue_spec(spec: str) -> tuple[str, float | None]:
    """What admission reads of a LocalQueue's spec: its stopPolicy and fair-sharing weight."""
    data = json.loads(spec)
    return data.get("stop_policy") or "None", data.get("fair_weight")


# Every admission run reads the queue objects; they seldom change, so each distinct row is
# converted once. The keys are the rows as read, so any change shows at the next run.
@lru_cache(maxsize=1024)
def _cluster_queue(
    name: str, cohort_name: str, spec: str, known_checks: frozenset[str]
) -> s.ClusterQueue:
    return cluster_queue(name, cohort_name, json.loads(spec), known_checks)


@lru_cache(maxsize=1024)
def _cohort(name: str, parent_name: str, spec: str) -> s.Cohort:
    return cohort(name, parent_name, json.loads(spec))


@lru_cache(maxsize=1024)
def _resource_flavor(name: str, spec: str) -> s.ResourceFlavor:
    return resource_flavor(name, json.loads(spec))


@lru_cache(maxsize=256)
def _scheduling_config(spec: str | None) -> SchedulingConfig:
    return scheduling_config(json.loads(spec) if spec is not None else default_configuration())


def cluster_scheduling_config(cluster: Cluster) -> SchedulingConfig:
    """What the scheduler reads of the cluster's Configuration (Kueue's defaults when none)."""
    return _scheduling_config(_configuration_text(cluster))


def _configuration_text(cluster: Cluster) -> str | None:
    table = connection.ops.quote_name(Configuration._meta.db_table)
    with connection.cursor() as cursor:
        query = f"SELECT CAST(spec AS text) FROM {table} WHERE cluster_id = %s"  # noqa: S608
        cursor.execute(query, [cluster.pk])
        row = cursor.fetchone()
    return row[0] if row else None


def configuration(cluster: Cluster) -> dict[str, Any]:
    """The normal form of the cluster's Kueue Configuration (Kueue's defaults when none)."""
    spec = Configuration.objects.filter(cluster=cluster).values_list("spec", flat=True).first()
    return spec if spec is not None else default_configuration()


def scheduling_config(spec: Mapping[str, Any]) -> SchedulingConfig:
    """What the scheduler reads of a Configuration: feature gates as Kueue defaults them."""
    gates = spec["feature_gates"]
    fair, afs = spec["fair_sharing"], spec["admission_fair_sharing"]
    wait = spec["wait_for_pods_ready"]
    return SchedulingConfig(
        fair_sharing=fair is not None,
        fair_sharing_strategies=tuple(fair["preemption_strategies"])
        if fair
        else SchedulingConfig().fair_sharing_strategies,
        # pkg/util/admissionfairsharing `Enabled`: configured and the gate (beta, on).
        admission_fair_sharing=AdmissionFairSharing(
            afs["usage_half_life_time"],
            afs["usage_sampling_interval"],
            afs["resource_weights"],
        )
        if afs is not None and gates.get("AdmissionFairSharing", True)
        else None,
        partial_admission=gates.get("PartialAdmission", True),
        tas_balanced_placement=gates.get("TASBalancedPlacement", False),
        block_admission=wait["enable"] and wait["block_admission"],
    )


def _with_topology(
    cluster: Cluster,
    snapshot: s.Snapshot,
    topologies: Mapping[str, s.Topology],
    tas_ids: set[int],
) -> s.Snapshot:
    """What TAS flavors place pods on: topologies, nodes and what non-TAS pods take."""
    return replace(
        snapshot,
        topologies=topologies,
        nodes=cluster_nodes(cluster.pk).nodes,
        non_tas_usage=non_tas_usage(cluster, tas_ids),
    )


@lru_cache(maxsize=256)
def _topology(name: str, spec: str) -> s.Topology:
    return s.Topology(name, tuple(json.loads(spec).get("levels") or ()))


@dataclass(frozen=True, slots=True)
class ClusterNodes:
    nodes: tuple[s.Node, ...]
    """Every node of the cluster, by name."""
    ids: dict[str, int]
    """Node primary keys by name."""


_nodes_kept: _KeptWhileStamped[ClusterNodes] = _KeptWhileStamped(NodeGeneration)


def cluster_nodes(cluster_id: int) -> ClusterNodes:
    """The cluster's nodes as the scheduler sees them.

    Every admission run of a TAS cluster, and every round of the simulated kube-scheduler,
    asks for them, and they seldom change: the nodes this process converted last are kept
    while the cluster's `NodeGeneration` (renewed at every write to its nodes) stays the
    same."""
    return _nodes_kept.get(cluster_id, partial(_read_nodes, cluster_id))[0]


def _read_nodes(cluster_id: int) -> ClusterNodes:
    # Plain SQL: a TAS cluster has hundreds of nodes, and the ORM's per-row work cost more
    # than the query.
    columns = "id, name, CAST(labels AS text), CAST(taints AS text), CAST(allocatable AS text), "
    rows = _select(Node, cluster_id, columns + "ready", "name")
    return ClusterNodes(
        nodes=tuple(
            s.Node(
                name=name,
                labels=json.loads(labels),
                taints=tuple(taint(t) for t in json.loads(taints)),
                allocatable=json.loads(allocatable),
                ready=bool(ready),  # SQLite answers 0 or 1
            )
            for _, name, labels, taints, allocatable, ready in rows
        ),
        ids={name: pk for pk, name, *_ in rows},
    )


def _tas_workload_ids(workloads: Iterable[s.Workload], ids: Mapping[str, int]) -> set[int]:
    return {
        ids[w.key]
        for w in workloads
        if w.admission and any(p.topology_assignment for p in w.admission.pod_sets)
    }


def non_tas_usage(cluster: Cluster, tas_ids: set[int]) -> dict[str, dict[str, int]]:
    """Node name -> what bound pods of workloads without a topology assignment take (TAS
    accounts its own workloads from their assignments), as `scheduler.node_charge` counts."""
    quote = connection.ops.quote_name
    pods, nodes = quote(Pod._meta.db_table), quote(Node._meta.db_table)
    phases = ", ".join(["%s"] * len(live.HOLDING_NODE))
    with connection.cursor() as cursor:
        # Only pending and running pods hold a node (every other phase unbinds), which the
        # (cluster, phase, node) index finds without reading every pod the cluster ever had.
        # Counted per node, workload and spec in the database: a workload's pods on a node
        # mostly share one, so a few rows stand for many pods. In SQL, as `_specs`.
        cursor.execute(
            f"SELECT n.name, p.workload_id, CAST(p.scheduling AS text), COUNT(*) FROM {pods} p "  # noqa: S608
            f"JOIN {nodes} n ON n.id = p.node_id "
            f"WHERE p.cluster_id = %s AND p.phase IN ({phases}) AND p.node_id IS NOT NULL "
            "GROUP BY n.name, p.workload_id, CAST(p.scheduling AS text)",
            [cluster.pk, *live.HOLDING_NODE],
        )
        alike = cursor.fetchall()
    usage: dict[str, dict[str, int]] = {}
    for name, workload_id, spec, count in alike:
        if workload_id in tas_ids:
            continue
        used = usage.setdefault(name, {})
        for resource, amount in _per_pod(spec):
            used[resource] = used.get(resource, 0) + amount * count
    return usage


@lru_cache(maxsize=1024)
def _per_pod(spec: str) -> tuple[tuple[str, int], ...]:
    """What one pod with this scheduling spec (as text) takes of its node."""
    return tuple(s.node_charge(json.loads(spec).get("requests", {})).items())


def node(row: Node) -> s.Node:
    return s.Node(
        name=row.name,
        labels=row.labels,
        taints=tuple(taint(t) for t in row.taints),
        allocatable=row.allocatable,
        ready=row.ready,
    )
