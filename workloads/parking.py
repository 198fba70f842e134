"""Kueue's inadmissible workloads: parked until capacity is released (BestEffortFIFO).

Kueue moves every inadmissible workload back to its queue a batch period (one second) after a
release of capacity, with every release made meanwhile (`inadmissible_workloads.go`: a
delaying work queue), and requeues at once, rather than parks, a workload its scheduler popped
before a requeue it had not seen (`queueInadmissibleCycle` against `popCycle`). Here each
cluster counts its requeues (`WorkloadChangeLog.releases`), a workload an admission run finds
inadmissible keeps the count the run read (`Workload.parked_release`), and it is parked while
the count has not moved. A release only notes itself and its time (`CapacityRelease`); the
first admission run a batch period after the earliest note, under the cluster's admission
lock, counts every note committed by then, and the simulated clock stops there
(`runtime.next_event_at`).

A release writes one row instead of every parked workload's (151 a release, 461,734 in all, in
Kueue's baseline suite) and takes no lock; a run that read the count before a concurrent
requeue committed parks nothing that requeue should have requeued, where clearing the parked
rows missed those the run was parking.

The runs after a requeue park most of those workloads again, each already holding an older
count (460,063 of the suite's 488,190 parks, in 1,012 runs): a run lists them in one
`ParkedSet` of the current count (`park_again`) instead of updating each row, and the set
counts for a workload while it holds a count of its own. Whatever takes a workload out of the
inadmissible set (its admission, a run that no longer finds it inadmissible) clears its count,
so a set it is still listed in no longer counts; the sets of a count are deleted when the
count moves on (`counted`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django.db import connection, transaction
from django.db.models import BigIntegerField, Q, Subquery, Value
from django.db.models.expressions import Combinable, Expression
from django.db.models.functions import Coalesce

from clusters.models import Cluster
from controlplane import bulk
from controlplane.prepared import Param, Prepared
from workloads.locks import lock_admission
from workloads.models import (
    CapacityRelease,
    ParkedSet,
    Workload,
    WorkloadChange,
    WorkloadChangeLog,
)

REQUEUE_BATCH = timedelta(seconds=1)
"""Kueue's `requeueBatchPeriod`."""


def release(cluster_id: int, at: datetime) -> None:
    """Capacity was released at `at`, in the caller's transaction: noted, for the admission run
    a batch period later to count. It takes no lock: waiting for a run's could deadlock with
    it, and holding the lock to the commit would hold up every run behind the caller's other
    work. Inserted as rows are in bulk: the ORM took longer to build the statement than the
    database to run it."""
    bulk.insert_rows(CapacityRelease, ["cluster_id", "at"], [(cluster_id, at)])


def counted(cluster_id: int, now: datetime) -> int:
    """Under the admission lock, at the start of a run at `now`: the cluster's count of
    requeues. The first run a batch period after the earliest noted release requeues: it counts
    one, for every release noted by `now` (committed by now, each consumed once: one committed
    later counts at the next requeue)."""
    noted = connection.ops.quote_name(CapacityRelease._meta.db_table)
    log = connection.ops.quote_name(WorkloadChangeLog._meta.db_table)
    first = _FIRST_NOTED.rows(cluster=cluster_id)
    with connection.cursor() as cursor:
        if not first or first[0] + REQUEUE_BATCH > now:
            cursor.execute(f"SELECT releases FROM {log} WHERE cluster_id = %s", [cluster_id])  # noqa: S608
            found = cursor.fetchone()
            return found[0] if found is not None else 0
        cursor.execute(
            f"DELETE FROM {noted} WHERE cluster_id = %s AND at <= %s",  # noqa: S608
            [cluster_id, _AT.get_db_prep_value(now, connection)],
        )
        cursor.execute(
            # One requeue of the parked workloads is as good as several.
            f"UPDATE {log} SET releases = releases + 1 "  # noqa: S608
            "WHERE cluster_id = %s RETURNING releases",
            [cluster_id],
        )
        found = cursor.fetchone()
        if found is None:
            return WorkloadChangeLog.objects.create(cluster_id=cluster_id, releases=1).releases
        count: int = found[0]
        sets = connection.ops.quote_name(ParkedSet._meta.db_table)
        cursor.execute(
            f"DELETE FROM {sets} WHERE cluster_id = %s AND release < %s",  # noqa: S608
            [cluster_id, count],
        )
    return count


def next_requeue(cluster_id: int) -> datetime | None:
    """When the noted releases are due to be counted, if a workload is parked to be requeued
    then (for the simulated clock: a requeue of nothing changes nothing)."""
    first = _FIRST_NOTED.rows(cluster=cluster_id)
    if not first or not _ANY_PARKED.rows(cluster=cluster_id):
        return None
    due: datetime = first[0] + REQUEUE_BATCH
    return due


def park_again(cluster_id: int, count: int, pks: Collection[int]) -> None:
    """Under the admission lock: parks the workloads `pks`, requeued since they were last
    parked, at the count `count`, in one `ParkedSet` and one change that names it. The few of
    them that hold no count of their own (the set would not count for them) are given this one."""
    if not pks:
        return
    (parked_set,) = bulk.insert_rows_returning_pks(
        ParkedSet, ["cluster_id", "release", "workloads"], [(cluster_id, count, sorted(pks))]
    )
    bulk.insert_rows(
        WorkloadChange,
        ["cluster_id", "parked_release", "parked_set"],
        [(cluster_id, count, parked_set)],
    )
    keys, param = bulk.key_table(pks, "bigint")
    table = connection.ops.quote_name(Workload._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET parked_release = %s "  # noqa: S608
            f"WHERE id IN (SELECT value FROM {keys}) AND parked_release IS NULL",
            [count, param],
        )


def listed_in(parked_sets: Iterable[int]) -> dict[int, list[int]]:
    """The workloads each of the `ParkedSet`s lists, by its id: those deleted are missing."""
    return dict(ParkedSet.objects.filter(pk__in=list(parked_sets)).values_list("pk", "workloads"))


def count_noted(now: datetime) -> None:
    """Beat: count the releases due by `now` of clusters no admission run reads (a real
    cluster's, whose admission is Kueue's), so that they do not pile up. Each under the
    cluster's admission lock, in a transaction of its own."""
    noted = CapacityRelease.objects.filter(at__lte=now - REQUEUE_BATCH)
    for cluster in Cluster.objects.filter(
        pk__in=list(noted.values_list("cluster_id", flat=True).distinct())
    ):
        with transaction.atomic():
            lock_admission(cluster)
            counted(cluster.pk, now)


def releases(cluster_id: int) -> int:
    """The cluster's count of requeues as readers see it: a release not yet requeued has not
    moved it, as Kueue's inadmissible workloads wait for their batch."""
    found = WorkloadChangeLog.objects.filter(cluster_id=cluster_id).values_list("releases")
    return int(next(iter(found), (0,))[0])


_AT = CapacityRelease._meta.get_field("at")
# The index's first row: a release takes no lock, so there may be many.
_FIRST_NOTED = Prepared(
    lambda: (
        CapacityRelease.objects.filter(cluster_id=Param("cluster"))
        .order_by("at")
        .values_list("at", flat=True)[:1]
    )
)
_ANY_PARKED = Prepared(
    lambda: (
        Workload.objects.filter(
            _parked(Param("cluster"), _count(Param("cluster"))),
            cluster_id=Param("cluster"),
            phase=Workload.Phase.PENDING,
        )
        .order_by()
        .values_list("pk", flat=True)[:1]
    )
)


class Parked:
    """Which of a cluster's workloads are parked at its count of releases `count`: those whose
    own count (`Workload.parked_release`) is at least `count`, and those holding an older
    count that a `ParkedSet` of `count` lists."""

    def __init__(self, cluster_id: int, count: int):
        self.cluster_id, self.count = cluster_id, count

    @cached_property
    def listed(self) -> frozenset[int]:
        """The workloads the cluster's sets of `count` list, read once, when first needed."""
        sets = ParkedSet.objects.filter(cluster_id=self.cluster_id, release__gte=self.count)
        return frozenset(pk for listed in sets.values_list("workloads", flat=True) for pk in listed)

    def __call__(self, pk: int, parked_release: int | None) -> bool:
        if parked_release is None:
            return False
        return parked_release >= self.count or pk in self.listed

    def of(self, row: Workload) -> bool:
        return self(row.pk, row.parked_release)

    def q(self) -> Q:
        """In SQL, for a filter of the cluster's workloads."""
        return _parked(self.cluster_id, self.count)


def now(cluster_id: int) -> Parked:
    """Parked now, as `releases` counts."""
    return Parked(cluster_id, releases(cluster_id))


def everywhere(cluster_ids: Iterable[int]) -> dict[int, Parked]:
    """`now` of each of the clusters, by its id, their counts read in one query."""
    ids = list(cluster_ids)
    counts = dict(
        WorkloadChangeLog.objects.filter(cluster_id__in=ids).values_list("cluster_id", "releases")
    )
    return {cluster_id: Parked(cluster_id, counts.get(cluster_id, 0)) for cluster_id in ids}


def _parked(cluster: int | Param, count: int | Combinable) -> Q:
    return Q(parked_release__gte=count) | Q(
        parked_release__isnull=False, pk__in=_Listed(cluster, count)
    )


def _count(cluster: Param) -> Combinable:
    """The cluster's count of requeues, in SQL."""
    log = WorkloadChangeLog.objects.filter(cluster_id=cluster).values("releases")
    return Coalesce(Subquery(log[:1]), Value(0))


class _Listed(Expression):
    """`pk__in=_Listed(cluster, count)`: the workloads the cluster's sets of the count list,
    read from their JSON by the database."""

    def __init__(self, cluster: int | Param, count: int | Combinable):
        super().__init__(output_field=BigIntegerField())
        self.cluster, self.count = (
            value if isinstance(value, Expression) else Value(value) for value in (cluster, count)
        )

    def get_source_expressions(self) -> list[Any]:
        return [self.cluster, self.count]

    def set_source_expressions(self, exprs: Sequence[Any]) -> None:
        self.cluster, self.count = exprs

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        cluster, cluster_params = compiler.compile(self.cluster)
        count, count_params = compiler.compile(self.count)
        sets = connection.ops.quote_name(ParkedSet._meta.db_table)
        if connection.vendor == "postgresql":
            member, source = "(jsonb_array_elements_text(s.workloads))::bigint", f"{sets} s"
        else:
            member, source = "j.value", f"{sets} s, json_each(s.workloads) j"
        sql = (
            f"SELECT {member} FROM {source} WHERE s.cluster_id = {cluster} AND s.release >= {count}"  # noqa: S608
        )
        return f"({sql})", (*cluster_params, *count_params)
