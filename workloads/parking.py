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
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import (
    BooleanField,
    ExpressionWrapper,
    OuterRef,
    Q,
    Subquery,
    Value,
)
from django.db.models.expressions import Combinable
from django.db.models.functions import Coalesce

from clusters.models import Cluster
from controlplane import bulk
from controlplane.prepared import Param, Prepared
from workloads.locks import lock_admission
from workloads.models import CapacityRelease, Workload, WorkloadChangeLog

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
    if found is not None:
        count: int = found[0]
        return count
    return WorkloadChangeLog.objects.create(cluster_id=cluster_id, releases=1).releases


def next_requeue(cluster_id: int) -> datetime | None:
    """When the noted releases are due to be counted, if a workload is parked to be requeued
    then (for the simulated clock: a requeue of nothing changes nothing)."""
    first = _FIRST_NOTED.rows(cluster=cluster_id)
    if not first or not _ANY_PARKED.rows(cluster=cluster_id):
        return None
    due: datetime = first[0] + REQUEUE_BATCH
    return due


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
            parked_at(_count(Param("cluster"))),
            cluster_id=Param("cluster"),
            phase=Workload.Phase.PENDING,
        )
        .order_by()
        .values_list("pk", flat=True)[:1]
    )
)


def parked_at(count: int | Combinable) -> Q:
    """Parked while the count of releases is `count`."""
    return Q(parked_release__gte=count)


def is_parked(row: Workload, count: int) -> bool:
    return row.parked_release is not None and row.parked_release >= count


def parked(count: int | Combinable) -> Coalesce:
    """For `annotate`: whether a workload is parked at the count of releases `count`."""
    return Coalesce(ExpressionWrapper(parked_at(count), output_field=BooleanField()), Value(False))


def parked_now() -> Coalesce:
    """For `annotate`: whether a workload is parked now, as `releases` counts (rows of any
    cluster)."""
    return parked(_count(OuterRef("cluster_id")))


def _count(cluster: Param | OuterRef) -> Combinable:
    """The cluster's count of requeues, in SQL: `cluster` is a parameter or a reference."""
    log = WorkloadChangeLog.objects.filter(cluster_id=cluster).values("releases")
    return Coalesce(Subquery(log[:1]), Value(0))
