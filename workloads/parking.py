"""Kueue's inadmissible workloads: parked until capacity is released (BestEffortFIFO).

Kueue moves every inadmissible workload back to its queue when capacity is released, and
requeues at once, rather than parks, a workload its scheduler popped before a release it had
not seen (`queueInadmissibleCycle` against `popCycle`). Here each cluster counts its releases
(`WorkloadChangeLog.releases`), a workload an admission run finds inadmissible keeps the count
the run read (`Workload.parked_release`), and it is parked while the count has not moved. A
release only notes itself (`CapacityRelease`); the next admission run, under the cluster's
admission lock, counts the notes committed by then, and readers count a note already.

A release writes one row instead of every parked workload's (151 a release, 461,734 in all, in
Kueue's baseline suite) and takes no lock; a run that read the count before a concurrent
release committed parks nothing that release should have requeued, where clearing the parked
rows missed those the run was parking.
"""

from __future__ import annotations

from django.db import connection, transaction
from django.db.models import (
    BooleanField,
    Case,
    Exists,
    ExpressionWrapper,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
)
from django.db.models.expressions import Combinable
from django.db.models.functions import Coalesce

from clusters.models import Cluster
from controlplane import bulk
from workloads.locks import lock_admission
from workloads.models import CapacityRelease, Workload, WorkloadChangeLog


def release(cluster_id: int) -> None:
    """Capacity was released, in the caller's transaction: noted, for the next admission run
    to count. It takes no lock: waiting for a run's could deadlock with it, and holding the
    lock to the commit would hold up every run behind the caller's other work. Inserted as
    rows are in bulk: the ORM took longer to build the statement than the database to run it."""
    bulk.insert_rows(CapacityRelease, ["cluster_id"], [(cluster_id,)])


def counted(cluster_id: int) -> int:
    """Under the admission lock, at the start of a run: the cluster's count of releases, with
    those noted since the last run (committed by now, each consumed once: one committed later
    counts at the next run)."""
    noted = connection.ops.quote_name(CapacityRelease._meta.db_table)
    log = connection.ops.quote_name(WorkloadChangeLog._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {noted} WHERE cluster_id = %s", [cluster_id])  # noqa: S608
        if not cursor.rowcount:  # the count as it stands: a release noted since counts next run
            cursor.execute(f"SELECT releases FROM {log} WHERE cluster_id = %s", [cluster_id])  # noqa: S608
            found = cursor.fetchone()
            return found[0] if found is not None else 0
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


def count_noted() -> None:
    """Beat: count the noted releases of clusters no admission run reads (a real cluster's,
    whose admission is Kueue's), so that they do not pile up. Each under the cluster's
    admission lock, in a transaction of its own."""
    noted = CapacityRelease.objects.values_list("cluster_id", flat=True).distinct()
    for cluster in Cluster.objects.filter(pk__in=list(noted)):
        with transaction.atomic():
            lock_admission(cluster)
            counted(cluster.pk)


def releases(cluster_id: int) -> int:
    """The cluster's count of releases as readers see it: a release noted and not counted yet
    counts already (the next run will count it)."""
    found = Cluster.objects.filter(pk=cluster_id).values_list(_count(cluster_id), flat=True)
    return int(next(iter(found), 0))


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


def _count(cluster: int | OuterRef) -> Combinable:
    """The count of releases of `cluster` (a primary key, or a reference to one), a noted
    release included."""
    log = WorkloadChangeLog.objects.filter(cluster_id=cluster).values("releases")
    noted = Exists(CapacityRelease.objects.filter(cluster_id=cluster))
    return Coalesce(Subquery(log[:1]), Value(0)) + Case(When(noted, then=1), default=0)
