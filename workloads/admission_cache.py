"""The workloads admission reads, kept in memory between runs by the process that holds a
cluster's admission lock.

Read straight from the database (`snapshot.query_active_rows`), every run ranked all pending
workloads of the cluster to find each LocalQueue's heads: the cost grew with the backlog times
the runs. Here a cluster's pending workloads stay sorted per LocalQueue, and each run re-reads
only the rows that database triggers noted as changed (`WorkloadChange`), whoever wrote them:
this process's own admissions, the simulated cluster, submissions, watches and the API alike.
A change that only parked or unparked a workload carries the new value, and is applied here
without reading the row.

The database stays the source of truth. A cluster this process has not read yet, or whose
changes another process consumed since (`AdmissionCacheOwner`), is read in full. Only a caller
holding the cluster's admission lock may use the cache (`admission.admit_pending`): the lock
orders the reads, so no change is consumed twice or missed.
"""

from __future__ import annotations

import uuid
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection
from django.db.models import Q, QuerySet

from clusters.models import Cluster
from controlplane import bulk
from workloads.models import AdmissionCacheOwner, Workload, WorkloadChange
from workloads.snapshot import WorkloadRow, query_active_rows, read_rows

# A row as `read_rows` returns it, then whether it is active and when its back-off ends.
_CachedRow = tuple[WorkloadRow, bool, datetime | None]
_QueueKey = tuple[str, str]
# Queue order (Kueue's, as `snapshot.query_active_rows` sorts): preempting first, then higher
# priority, then older, then by name; the primary key makes each entry unique.
_Entry = tuple[tuple[bool, int, datetime, str], int]

_PARKED = 11  # `parked` in a WorkloadRow (snapshot._WORKLOAD_COLUMNS)
PENDING = Q(phase=Workload.Phase.PENDING)


class CacheDrift(AssertionError):
    """ADMISSION_CACHE_VERIFY: the cache and the database disagree (a write no trigger saw)."""


@dataclass
class _ClusterWorkloads:
    token: str
    rows: dict[int, _CachedRow] = field(default_factory=dict)
    """Every workload holding quota or pending (parked, deactivated or in a back-off too, so
    that parking changes apply here), by primary key."""
    holding: set[int] = field(default_factory=set)
    queues: dict[_QueueKey, list[_Entry]] = field(default_factory=dict)
    """Waiting workloads per (namespace, LocalQueue name), in queue order."""
    entries: dict[int, tuple[_QueueKey, _Entry]] = field(default_factory=dict)

    def put(self, cached: _CachedRow) -> None:
        row, active, requeue_at = cached
        pk, phase = row[0], row[12]
        if phase in Workload.HOLDING_QUOTA:
            self.holding.add(pk)
        elif phase != Workload.Phase.PENDING:
            return
        elif active and not row[_PARKED] and requeue_at is None:
            self._enqueue(row)
        self.rows[pk] = cached

    def park(self, pk: int, parked: bool) -> bool:
        """Apply a change of `parked` alone; False when the row is not here to change. Most
        changes of a busy cluster are these: only the row and its queue entry change."""
        if (cached := self.rows.get(pk)) is None:
            return False
        row, active, requeue_at = cached
        if row[_PARKED] == parked:
            return True
        row = (*row[:_PARKED], parked, *row[_PARKED + 1 :])
        self.rows[pk] = (row, active, requeue_at)
        if row[12] == Workload.Phase.PENDING and active and requeue_at is None:
            if parked:
                self._dequeue(pk)
            else:
                self._enqueue(row)
        return True

    def forget(self, pk: int) -> None:
        if self.rows.pop(pk, None) is None:
            return
        self.holding.discard(pk)
        self._dequeue(pk)

    def _enqueue(self, row: WorkloadRow) -> None:
        pk, namespace, name, queue, priority, queued_at = row[:6]
        entry = ((not row[10], -priority, queued_at, name), pk)  # row[10]: preempting
        insort(self.queues.setdefault((namespace, queue), []), entry)
        self.entries[pk] = ((namespace, queue), entry)

    def _dequeue(self, pk: int) -> None:
        if (found := self.entries.pop(pk, None)) is not None:
            key, entry = found
            queue = self.queues[key]
            del queue[bisect_left(queue, entry)]
            if not queue:
                del self.queues[key]

    def active_rows(self, heads_per_queue: int) -> list[WorkloadRow]:
        pks = set(self.holding)
        for queue in self.queues.values():
            pks.update(pk for _, pk in queue[:heads_per_queue])
        return [self.rows[pk][0] for pk in sorted(pks)]


_clusters: dict[int, _ClusterWorkloads] = {}


def active_rows(cluster: Cluster, heads_per_queue: int) -> list[WorkloadRow]:
    """What `snapshot.query_active_rows` returns, from memory plus the rows changed since the
    last call. The caller holds the cluster's admission lock, in a transaction."""
    cached = _current(cluster.pk)
    rows = cached.active_rows(heads_per_queue)
    if settings.ADMISSION_CACHE_VERIFY:
        expected = query_active_rows(cluster, heads_per_queue)
        if rows != expected:
            _clusters.pop(cluster.pk, None)
            raise CacheDrift(_drift(rows, expected))
    return rows


def _current(cluster_id: int) -> _ClusterWorkloads:
    cached = _clusters.get(cluster_id)
    owner = AdmissionCacheOwner.objects.filter(cluster_id=cluster_id).values_list("token")
    if cached is None or owner.first() != (cached.token,):
        return _reload(cluster_id)
    changed, parked = _consume_changes(cluster_id)
    changed += [pk for pk, value in parked.items() if not cached.park(pk, value)]
    if changed:
        fresh = _read(Workload.objects.filter(pk__in=bulk.key_set(changed)))
        for pk in changed:
            cached.forget(pk)
        for row in fresh:
            cached.put(row)
    return cached


def _reload(cluster_id: int) -> _ClusterWorkloads:
    token = uuid.uuid4().hex
    AdmissionCacheOwner.objects.update_or_create(cluster_id=cluster_id, defaults={"token": token})
    # Consumed before the read: a change committed in between is read now and again next time.
    _consume_changes(cluster_id)
    cached = _ClusterWorkloads(token)
    rows = Workload.objects.filter(Q(phase__in=Workload.HOLDING_QUOTA) | PENDING)
    for row in _read(rows.filter(cluster_id=cluster_id)):
        cached.put(row)
    _clusters[cluster_id] = cached
    return cached


def forget_cluster(cluster_id: int) -> None:
    """A deleted cluster's noted changes (deleting its workloads noted one each) and its
    cache's owner: nobody admits on it again to consume them."""
    WorkloadChange.objects.filter(cluster_id=cluster_id).delete()
    AdmissionCacheOwner.objects.filter(cluster_id=cluster_id).delete()
    _clusters.pop(cluster_id, None)


def _consume_changes(cluster_id: int) -> tuple[list[int], dict[int, bool]]:
    """Deletes the cluster's noted changes, in one statement (only what it deletes is read, so
    a change committed meanwhile stays for the next call), and returns the workloads to read
    again, and those whose changes since the last call only set `parked`, with its value."""
    table = connection.ops.quote_name(WorkloadChange._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE cluster_id = %s "  # noqa: S608
            "RETURNING id, workload_id, parked",
            [cluster_id],
        )
        changes = sorted(cursor.fetchall())
    read, parked = set(), {}
    for _, pk, value in changes:  # in the order they were made
        if value is None:
            read.add(pk)
        elif pk not in read:
            parked[pk] = bool(value)
    return sorted(read), {pk: v for pk, v in parked.items() if pk not in read}


def _read(rows: QuerySet[Workload]) -> list[_CachedRow]:
    return [
        (tuple(row), active, requeue_at)
        for *row, active, requeue_at in read_rows(rows, "active", "requeue_at")
    ]


def _drift(rows: list[WorkloadRow], expected: list[WorkloadRow]) -> str:
    cached, queried = {r[0]: r for r in rows}, {r[0]: r for r in expected}
    differ = sorted(
        pk for pk in cached.keys() | queried.keys() if cached.get(pk) != queried.get(pk)
    )
    shown = "; ".join(
        f"{pk}: cache {cached.get(pk)} database {queried.get(pk)}" for pk in differ[:3]
    )
    return f"admission cache drifted on {len(differ)} workloads: {shown}"
