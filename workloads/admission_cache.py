"""The workloads admission reads, kept in memory between runs by each process that takes a
cluster's admission lock.

Read straight from the database (`snapshot.query_active_rows`), every run ranked all pending
workloads of the cluster to find each LocalQueue's heads: the cost grew with the backlog times
the runs. Here a cluster's pending workloads stay sorted per LocalQueue, and each run re-reads
only the rows that database triggers noted as changed (`WorkloadChange`), whoever wrote them:
this process's own admissions, the simulated cluster, submissions, watches and the API alike.
A workload's `parked` is read as of the cluster's count of capacity releases
(workloads/parking.py): a change that only parked a workload carries the count it was parked
at, and one that parked a run's workloads again names their `ParkedSet`; both are applied here
without reading the rows. When a run finds the count moved, every workload parked here goes
back to its queue, in memory, as no row changed.

Workers take turns on a cluster's lock, so the changes are a log that every worker's cache
reads, as an informer follows a watch: each run gives the changes no run has read yet the
cluster's next batch number (`WorkloadChangeLog`), and a cache reads the batches numbered since
its last run, its own and other workers'. Numbering under the lock orders the batches as their
runs commit: a change committed late gets a later batch, never one a cache has passed. Old
batches are deleted; a cache that had not seen them, or a cluster this process has not read
yet, is read in full. The database stays the source of truth. Only a caller holding the
cluster's admission lock may use the cache (`admission.admit_pending`).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from clusters.models import Cluster
from workloads import parking
from workloads.models import (
    CapacityRelease,
    ParkedSet,
    Workload,
    WorkloadChange,
    WorkloadChangeLog,
)
from workloads.snapshot import (
    PARKED,
    WorkloadRow,
    query_active_rows,
    query_waiting_rows,
    read_rows,
    read_rows_by_pk,
)

# A row as `read_rows` returns it, but for `parked` (always False here: `parked` is the set of
# its parked rows), then whether it is active and when its back-off ends.
_CachedRow = tuple[WorkloadRow, bool, datetime | None]
_QueueKey = tuple[str, str]
# Queue order (Kueue's, as `snapshot.query_active_rows` sorts): preempting first, then higher
# priority, then older, then by name; the primary key makes each entry unique.
_Entry = tuple[tuple[bool, int, datetime, str], int]
# A noted change: its id, its workload, the new `parked_release` if that was all that
# changed, and for workloads parked again, their `ParkedSet` (and no workload).
_Change = tuple[int, int | None, int | None, int | None]

PENDING = Q(phase=Workload.Phase.PENDING)
# Every PRUNE_EVERY batches, those older than the last KEEP_BATCHES are deleted: a worker that
# sat out that many runs of a cluster reads it in full. The log holds at most their sum.
KEEP_BATCHES = 128
PRUNE_EVERY = 32


class CacheDrift(AssertionError):
    """ADMISSION_CACHE_VERIFY: the cache and the database disagree (a write no trigger saw)."""


@dataclass
class _ClusterWorkloads:
    token: str
    """Of the cluster's log (`WorkloadChangeLog`)."""
    batch: int
    """The last batch of changes applied here: every earlier one was too."""
    releases: int
    """The count of capacity releases the rows' `parked` is read at."""
    committed: int = 0
    """The last batch whose run committed, as it learnt when it did."""
    confirm: Callable[[], None] | None = None
    """The last run's commit callback, pending while its transaction is open."""
    rows: dict[int, _CachedRow] = field(default_factory=dict)
    """Every workload holding quota or pending (parked, deactivated or in a back-off too, so
    that parking changes apply here), by primary key."""
    holding: set[int] = field(default_factory=set)
    queues: dict[_QueueKey, list[_Entry]] = field(default_factory=dict)
    """Waiting workloads per (namespace, LocalQueue name), in queue order."""
    entries: dict[int, tuple[_QueueKey, _Entry]] = field(default_factory=dict)
    parked: set[int] = field(default_factory=set)
    """The rows parked at `releases`. A release requeues thousands and a run parks most of
    them again, so parking changes this set and the queues, never the rows: a row stays the
    same tuple, which is how `snapshot` knows its conversion still holds."""

    def put(self, cached: _CachedRow) -> None:
        row = cached[0]
        pk, phase = row[0], row[12]
        if phase not in Workload.HOLDING_QUOTA and phase != Workload.Phase.PENDING:
            return
        parked = row[PARKED]
        if parked:
            cached = _with_parked(cached, False)
            self.parked.add(pk)
        if phase in Workload.HOLDING_QUOTA:
            self.holding.add(pk)
        elif _waits(cached, parked):
            self._enqueue(cached[0])
        self.rows[pk] = cached

    def park(self, pk: int, parked: bool) -> bool:
        """Apply a change of `parked` alone; False when the row is not here to change. Most
        changes of a busy cluster are these: only the parked set and the queue change."""
        if (cached := self.rows.get(pk)) is None:
            return False
        if (pk in self.parked) == parked:
            return True
        if parked:
            self.parked.add(pk)
        else:
            self.parked.discard(pk)
        if _waits(cached, not parked):
            self._dequeue(pk)
        elif _waits(cached, parked):
            self._enqueue(cached[0])
        return True

    def released(self, releases: int) -> None:
        """Capacity was released (the count moved on to `releases`): every parked workload
        goes back to its queue. A release each tick of a busy cluster requeues thousands, so
        each queue is sorted once rather than inserted into once per workload."""
        requeued = set()
        for pk in self.parked:
            cached = self.rows[pk]
            if _waits(cached, False):
                key, entry = _entry(cached[0])
                self.queues.setdefault(key, []).append(entry)
                self.entries[pk] = (key, entry)
                requeued.add(key)
        for key in requeued:
            self.queues[key].sort()
        self.parked.clear()
        self.releases = releases

    def changing(self) -> None:
        """Its memory is about to change: should the run fail on the way, the next one must
        read everything again."""
        self.committed, self.confirm = -1, None

    def ran(self, batch: int) -> None:
        """This run applied `batch`: trusted in the next run once the transaction commits."""
        self.batch = batch
        self.confirm = partial(setattr, self, "committed", batch)
        transaction.on_commit(self.confirm)

    def trusted(self) -> bool:
        """Whether the database holds what this cache applied: its last run committed, or runs
        in this thread's transaction, still open, with its savepoint not rolled back (Django
        drops a savepoint's commit callbacks with it). A run rolled back, a what-if's say,
        leaves changes here that the database took back, and its batch number may be another
        run's by now."""
        if self.committed == self.batch:
            return True
        # (savepoints, callback, robust); the last run's is near the end.
        return any(entry[1] is self.confirm for entry in reversed(connection.run_on_commit))

    def forget(self, pk: int) -> None:
        if self.rows.pop(pk, None) is None:
            return
        self.holding.discard(pk)
        self.parked.discard(pk)
        self._dequeue(pk)

    def _enqueue(self, row: WorkloadRow) -> None:
        key, entry = _entry(row)
        insort(self.queues.setdefault(key, []), entry)
        self.entries[row[0]] = (key, entry)

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
        # Only a row holding quota can be parked here (a waiting one is not): rarely, if ever.
        parked = self.parked
        return [
            _with_parked(self.rows[pk], True)[0] if pk in parked else self.rows[pk][0]
            for pk in sorted(pks)
        ]


def _entry(row: WorkloadRow) -> tuple[_QueueKey, _Entry]:
    """The row's LocalQueue and its entry there."""
    pk, namespace, name, queue, priority, queued_at = row[:6]
    return (namespace, queue), ((not row[10], -priority, queued_at, name), pk)  # 10: preempting


def _with_parked(cached: _CachedRow, parked: bool) -> _CachedRow:
    row, active, requeue_at = cached
    return (*row[:PARKED], parked, *row[PARKED + 1 :]), active, requeue_at


def _waits(cached: _CachedRow, parked: bool) -> bool:
    """In its LocalQueue: pending, active, not `parked`, and out of any back-off."""
    row, active, requeue_at = cached
    return row[12] == Workload.Phase.PENDING and active and not parked and requeue_at is None


_clusters: dict[int, _ClusterWorkloads] = {}


def active_rows(cluster: Cluster, heads_per_queue: int, releases: int) -> list[WorkloadRow]:
    """What `snapshot.query_active_rows` returns, from memory plus the rows changed since the
    last call. The caller holds the cluster's admission lock, in a transaction, and counted
    the releases of capacity (`parking.counted`)."""
    rows = _current(cluster.pk, releases).active_rows(heads_per_queue)
    query = partial(query_active_rows, cluster, heads_per_queue, releases)
    return _verified(cluster.pk, rows, query)


def waiting_rows(
    cluster: Cluster, queues: Collection[tuple[str, str]], releases: int
) -> list[WorkloadRow]:
    """What `snapshot.query_waiting_rows` returns, from memory: every workload waiting in the
    LocalQueues `queues`, past the window of heads too. The caller read this run's
    `active_rows` first, under the same lock, and wrote nothing since."""
    cached = _clusters[cluster.pk]
    pks = sorted(pk for queue in queues for _, pk in cached.queues.get(queue, ()))
    rows = [cached.rows[pk][0] for pk in pks]
    return _verified(cluster.pk, rows, partial(query_waiting_rows, cluster, queues, releases))


def _verified(
    cluster_id: int, rows: list[WorkloadRow], query: Callable[[], list[WorkloadRow]]
) -> list[WorkloadRow]:
    """`rows`, compared under ADMISSION_CACHE_VERIFY with what `query` reads from the database:
    a difference drops the cluster's cache and raises."""
    if settings.ADMISSION_CACHE_VERIFY and rows != (expected := query()):
        _clusters.pop(cluster_id, None)
        raise CacheDrift(_drift(rows, expected))
    return rows


def _current(cluster_id: int, releases: int) -> _ClusterWorkloads:
    token, batch, pruned = _next_batch(cluster_id)
    cached = _clusters.get(cluster_id)
    if (
        cached is None
        or cached.token != token
        or not pruned <= cached.batch < batch
        or cached.releases > releases
        or not cached.trusted()
    ):
        cached = _reload(cluster_id, token, batch, releases)
    else:
        cached.changing()
        if cached.releases < releases:
            cached.released(releases)
        changes = _number_changes(cluster_id, batch)
        if cached.batch < batch - 1:  # other workers' runs since this one's: theirs first
            changes = _read_batches(cluster_id, cached.batch, batch) + changes
        _apply(cluster_id, cached, changes)
    cached.ran(batch)
    if batch % PRUNE_EVERY == 0 and batch > KEEP_BATCHES:
        _prune(cluster_id, batch - KEEP_BATCHES)
    return cached


def _apply(cluster_id: int, cached: _ClusterWorkloads, changes: list[_Change]) -> None:
    changed, parked = _changed(changes)
    releases = cached.releases
    changed += [pk for pk, value in parked.items() if not cached.park(pk, value >= releases)]
    if changed:
        now_parked = parking.Parked(cluster_id, releases)
        fresh = _cached(read_rows_by_pk(changed, now_parked, "active", "requeue_at"))
        for pk in changed:
            cached.forget(pk)
        for row in fresh:
            cached.put(row)


def _reload(cluster_id: int, token: str, batch: int, releases: int) -> _ClusterWorkloads:
    # Numbered before the read: a change committed in between is read now and again later.
    _number_changes(cluster_id, batch)
    cached = _ClusterWorkloads(token, batch, releases)
    rows = Workload.objects.filter(Q(phase__in=Workload.HOLDING_QUOTA) | PENDING)
    for row in _cached(
        read_rows(
            rows.filter(cluster_id=cluster_id),
            parking.Parked(cluster_id, releases),
            "active",
            "requeue_at",
        )
    ):
        cached.put(row)
    _clusters[cluster_id] = cached
    return cached


def forget_cluster(cluster_id: int) -> None:
    """A deleted cluster's noted changes (deleting its workloads noted one each) and its log:
    nobody admits on it again to read them."""
    WorkloadChange.objects.filter(cluster_id=cluster_id).delete()
    WorkloadChangeLog.objects.filter(cluster_id=cluster_id).delete()
    CapacityRelease.objects.filter(cluster_id=cluster_id).delete()
    ParkedSet.objects.filter(cluster_id=cluster_id).delete()
    _clusters.pop(cluster_id, None)


def _next_batch(cluster_id: int) -> tuple[str, int, int]:
    """The cluster's log's token, its next batch number, and the last batch pruned."""
    table = connection.ops.quote_name(WorkloadChangeLog._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET batch = batch + 1 WHERE cluster_id = %s "  # noqa: S608
            "RETURNING token, batch, pruned",
            [cluster_id],
        )
        if (found := cursor.fetchone()) is not None:
            token, batch, pruned = found
            return token, batch, pruned
    log = WorkloadChangeLog.objects.create(cluster_id=cluster_id, batch=1)
    return log.token, log.batch, log.pruned


def _number_changes(cluster_id: int, batch: int) -> list[_Change]:
    """Gives every change no run has read yet the number `batch`, and returns them in the
    order they were made. Only the changes it numbers are read: one committed meanwhile is
    left for the next run."""
    table = connection.ops.quote_name(WorkloadChange._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET batch = %s "  # noqa: S608
            "WHERE cluster_id = %s AND batch IS NULL "
            "RETURNING id, workload_id, parked_release, parked_set",
            [batch, cluster_id],
        )
        return sorted(cursor.fetchall())


def _read_batches(cluster_id: int, after: int, before: int) -> list[_Change]:
    """The changes of the batches between `after` and `before`, in the order they were
    numbered and, within a batch, made."""
    rows = WorkloadChange.objects.filter(
        cluster_id=cluster_id, batch__gt=after, batch__lt=before
    ).order_by("batch", "id")
    return list(rows.values_list("id", "workload_id", "parked_release", "parked_set"))


def _changed(changes: list[_Change]) -> tuple[list[int], dict[int, int]]:
    """The workloads to read again, and those whose changes only parked them, with the last
    count: a row read again is read as it is now, whatever else changed before. A set deleted
    since (its count passed) parks nobody."""
    sets = [c[3] for c in changes if c[3] is not None]
    listed = parking.listed_in(sets) if sets else {}
    read, parked = set[int](), dict[int, int]()
    for _, pk, value, parked_set in changes:
        if parked_set is not None:
            assert value is not None  # a set's change holds its count
            for member in listed.get(parked_set, ()):
                if member not in read:
                    parked[member] = value
            continue
        assert pk is not None
        if value is None:
            read.add(pk)
        elif pk not in read:
            parked[pk] = value
    return sorted(read), {pk: v for pk, v in parked.items() if pk not in read}


def _prune(cluster_id: int, through: int) -> None:
    WorkloadChange.objects.filter(cluster_id=cluster_id, batch__lte=through).delete()
    WorkloadChangeLog.objects.filter(cluster_id=cluster_id).update(pruned=through)


def _cached(rows: list[WorkloadRow]) -> list[_CachedRow]:
    """Rows read with "active" and "requeue_at" last, as the cache keeps them."""
    return [(tuple(row), active, requeue_at) for *row, active, requeue_at in rows]


def _drift(rows: list[WorkloadRow], expected: list[WorkloadRow]) -> str:
    cached, queried = {r[0]: r for r in rows}, {r[0]: r for r in expected}
    differ = sorted(
        pk for pk in cached.keys() | queried.keys() if cached.get(pk) != queried.get(pk)
    )
    shown = "; ".join(
        f"{pk}: cache {cached.get(pk)} database {queried.get(pk)}" for pk in differ[:3]
    )
    return f"admission cache drifted on {len(differ)} workloads: {shown}"
