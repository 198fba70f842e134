"""The admission cache: every writer's change reaches it, and it admits exactly as the database.

Both databases: CI runs this file on SQLite and on PostgreSQL, whose triggers differ
(migration workloads/0011).
"""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext

from tests.support import NAMESPACE, at, job, submit
from workloads import admission, admission_cache, parking, runtime, whatif
from workloads.models import ParkedSet, Workload, WorkloadChange, WorkloadChangeLog
from workloads.snapshot import HEADS_PER_QUEUE, query_active_rows


def _same_as_the_database(cluster) -> bool:
    count = parking.releases(cluster.pk)
    cached = admission_cache.active_rows(cluster, HEADS_PER_QUEUE, count)
    return cached == query_active_rows(cluster, HEADS_PER_QUEUE, count)


def _unread(cluster):
    """The changes no admission run has read yet."""
    return WorkloadChange.objects.filter(cluster_id=cluster.pk, batch=None)


def _changes(cluster) -> list[int]:
    return sorted(_unread(cluster).values_list("workload_id", flat=True))


@pytest.fixture
def unverified(settings):
    """The cache alone, as in production: a missed change shows as a wrong decision."""
    settings.ADMISSION_CACHE_VERIFY = False


def test_the_triggers_note_inserts_deletes_and_changes_to_what_admission_reads(gpu_queues):
    WorkloadChange.objects.all().delete()
    row = submit(gpu_queues, "noted", gpus=2)
    assert _changes(gpu_queues) == [row.pk]

    WorkloadChange.objects.all().delete()
    Workload.objects.filter(pk=row.pk).update(finished_at=at(), training_started_at=at())
    Workload.objects.filter(pk=row.pk).update(priority=row.priority)  # the same value
    assert _changes(gpu_queues) == [], "columns admission does not read, or no change"

    Workload.objects.filter(pk=row.pk).update(priority=row.priority + 1)
    Workload.objects.filter(pk=row.pk).update(pod_sets=[{**row.pod_sets[0], "count": 2}])
    assert _changes(gpu_queues) == [row.pk, row.pk]

    WorkloadChange.objects.all().delete()
    row.owner.delete()
    assert _changes(gpu_queues) == [row.pk]


def test_a_deleted_clusters_changes_and_cache_go_with_it(gpu_queues):
    submit(gpu_queues, "running", gpus=2)
    admission.admit_pending(gpu_queues, at())
    assert WorkloadChangeLog.objects.filter(cluster_id=gpu_queues.pk).exists()
    submit(gpu_queues, "waiting", gpus=2)  # a change no run consumed yet
    cluster_id = gpu_queues.pk

    gpu_queues.delete()

    assert not WorkloadChange.objects.filter(cluster_id=cluster_id).exists()
    assert not WorkloadChangeLog.objects.filter(cluster_id=cluster_id).exists()
    assert cluster_id not in admission_cache._clusters


def test_a_write_behind_admissions_back_is_read_by_its_next_run(gpu_queues, unverified):
    """The ClusterQueue has 6 GPUs. `big` takes them; `small` waits. Then a writer other than
    admission (here the ORM, as a watch or the API would) finishes `big`: the cached queues must
    learn of it, or `small` waits for quota that is free."""
    big = submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    small = submit(gpu_queues, "small", gpus=2)
    admission.admit_pending(gpu_queues, at())
    big.refresh_from_db()
    small.refresh_from_db()
    assert (big.phase, small.phase) == (Workload.Phase.ADMITTED, Workload.Phase.PENDING)

    runtime.finish([big], at(), Workload.Phase.FINISHED)
    decisions = admission.admit_pending(gpu_queues, at(seconds=1))

    assert [a.workload for a in decisions.admitted] == [f"{NAMESPACE}/{small.name}"]


class _Worker:
    """Another worker's admission caches: swapped in for this process's while it runs."""

    def __init__(self):
        self.caches: dict = {}

    def admit(self, cluster, now):
        mine, admission_cache._clusters = admission_cache._clusters, self.caches
        try:
            return admission.admit_pending(cluster, now)
        finally:
            admission_cache._clusters = mine


def _workload_reads(queries) -> list[str]:
    return [q["sql"] for q in queries if 'FROM "workloads_workload"' in q["sql"]]


def test_workers_taking_turns_read_each_others_batches_not_everything(gpu_queues, unverified):
    """Two workers take turns on the admission lock. The other one numbered the changes in
    its run: this one reads that batch of changes, and only the rows it names."""
    other = _Worker()
    big = submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    submit(gpu_queues, "small", gpus=2)
    other.admit(gpu_queues, at())  # reads everything: its first run; `small` waits
    runtime.finish([big], at(), Workload.Phase.FINISHED)
    other.admit(gpu_queues, at(seconds=1))  # admits `small`: the batch names both

    with CaptureQueriesContext(connection) as queries:
        decisions = admission.admit_pending(gpu_queues, at(seconds=2))

    assert not decisions.admitted  # it knows `small` holds the quota now
    reads = _workload_reads(queries)
    assert len(reads) == 1, reads
    assert "WHERE id IN (SELECT value FROM" in reads[0]  # by key, not the cluster's all
    assert _same_as_the_database(gpu_queues)


def test_a_worker_reads_the_workloads_another_parked_again_from_its_set(gpu_queues, unverified):
    """The other worker's run, after a requeue, parks the workloads again in one set: this one
    reads that set with the batch and takes them out of its queues, reading no workload row."""
    other = _Worker()
    submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    waiting = [submit(gpu_queues, name, gpus=2) for name in ("first", "second")]
    admission.admit_pending(gpu_queues, at())  # parks both, by their rows
    admission.admit_pending(gpu_queues, at())  # reads them again: its own writes
    other.admit(gpu_queues, at())  # reads everything: its first run
    runtime.unpark(gpu_queues, at())

    decisions = other.admit(gpu_queues, at(seconds=1))  # requeues both, parks them again

    assert [p.parked for p in decisions.pending] == [True, True]
    (listed,) = ParkedSet.objects.values_list("workloads", flat=True)
    assert sorted(listed) == sorted(row.pk for row in waiting)
    with CaptureQueriesContext(connection) as queries:
        decisions = admission.admit_pending(gpu_queues, at(seconds=1))
    assert not decisions.pending, "none tried again: parked"
    assert not _workload_reads(queries)
    assert _same_as_the_database(gpu_queues)


def test_a_worker_that_missed_pruned_batches_reads_everything(gpu_queues, unverified, monkeypatch):
    monkeypatch.setattr(admission_cache, "KEEP_BATCHES", 2)
    monkeypatch.setattr(admission_cache, "PRUNE_EVERY", 1)
    other = _Worker()
    big = submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    small = submit(gpu_queues, "small", gpus=2)
    runtime.finish([big], at(), Workload.Phase.FINISHED)
    for second in range(1, 5):  # the other worker admits `small`, then runs on
        other.admit(gpu_queues, at(seconds=second))
    log = WorkloadChangeLog.objects.get(cluster_id=gpu_queues.pk)
    assert log.pruned == log.batch - 2 > admission_cache._clusters[gpu_queues.pk].batch
    # `big`'s finish, numbered by the other worker's first run, is gone with its batch.
    assert not WorkloadChange.objects.filter(workload_id=big.pk).exists()

    with CaptureQueriesContext(connection) as queries:
        decisions = admission.admit_pending(gpu_queues, at(seconds=6))

    assert not decisions.admitted
    assert any('"workloads_workload"."phase" IN' in sql for sql in _workload_reads(queries))
    assert Workload.objects.get(pk=small.pk).phase == Workload.Phase.ADMITTED


def test_verification_fails_when_the_cache_and_the_database_disagree(gpu_queues):
    big = submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    submit(gpu_queues, "small", gpus=2)
    # A change no trigger saw: the cache loses `big`, and no change row tells it to read it.
    admission_cache._clusters[gpu_queues.pk].forget(big.pk)
    WorkloadChange.objects.filter(workload_id=big.pk).delete()

    with pytest.raises(admission_cache.CacheDrift, match=f"1 workloads: {big.pk}: cache None"):
        admission.admit_pending(gpu_queues, at(seconds=1))

    # The drifted cache is dropped: the next run reads the cluster afresh.
    admission.admit_pending(gpu_queues, at(seconds=2))


def test_verification_reads_the_queues_past_the_window_when_a_run_parks_their_shape(gpu_queues):
    """A run parks the workloads past its window of heads from the cache too: verified."""
    submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    submit(gpu_queues, "first", gpus=2)
    behind = submit(gpu_queues, "second", gpus=2)
    assert _same_as_the_database(gpu_queues)  # the cache has read both
    admission_cache._clusters[gpu_queues.pk].forget(behind.pk)  # as a missed change would

    with pytest.raises(admission_cache.CacheDrift, match=f"1 workloads: {behind.pk}: cache None"):
        admission.admit_pending(gpu_queues, at(seconds=1), heads_per_queue=1)


def _noted(cluster) -> list[tuple[int, int | None]]:
    return list(_unread(cluster).order_by("pk").values_list("workload_id", "parked_release"))


def test_a_change_that_only_parks_carries_the_count_it_parked_at(gpu_queues):
    row = submit(gpu_queues, "noted", gpus=2)
    WorkloadChange.objects.all().delete()

    Workload.objects.filter(pk=row.pk).update(parked_release=3)
    Workload.objects.filter(pk=row.pk).update(parked_release=None)  # none: read the row
    Workload.objects.filter(pk=row.pk).update(parked_release=3, pending_reason="NoFit")
    Workload.objects.filter(pk=row.pk).update(priority=row.priority + 1)

    assert _noted(gpu_queues) == [(row.pk, 3), (row.pk, None), (row.pk, None), (row.pk, None)]


def test_a_release_changes_no_row_and_parking_again_reaches_the_cache_without_a_read(
    gpu_queues, unverified
):
    """Every release of capacity requeues the cluster's inadmissible workloads and the next run
    parks most of them again: the release is one row, which changes no workload, the run lists
    those it parks again in one set, which changes no workload either, and the cache applies
    the parking from the set alone. The row it hands over stays the same tuple throughout, so
    the snapshot's conversion of it holds (`snapshot._workloads`)."""
    submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    small = submit(gpu_queues, "small", gpus=2)
    admission.admit_pending(gpu_queues, at())
    small.refresh_from_db()
    assert parking.now(gpu_queues.pk).of(small)
    _same_as_the_database(gpu_queues)  # reads it: its reason is new

    def cached_rows(count: int) -> list[tuple]:
        with CaptureQueriesContext(connection) as queries:
            rows = admission_cache.active_rows(gpu_queues, HEADS_PER_QUEUE, count)
        assert not [q["sql"] for q in queries if 'FROM "workloads_workload"' in q["sql"]]
        assert rows == query_active_rows(gpu_queues, HEADS_PER_QUEUE, count)
        return rows

    before = parking.releases(gpu_queues.pk)
    runtime.unpark(gpu_queues, at())  # noted: the first run a second later counts it
    assert _noted(gpu_queues) == []
    count = parking.counted(gpu_queues.pk, at(seconds=1))
    assert count == before + 1
    [requeued] = [row for row in cached_rows(count) if row[0] == small.pk]

    parked_before = Workload.objects.get(pk=small.pk).parked_release
    admission.admit_pending(gpu_queues, at(seconds=1))  # parked again, for the same reason
    assert _noted(gpu_queues) == [(None, count)]
    listed = ParkedSet.objects.filter(cluster_id=gpu_queues.pk).values_list("workloads", flat=True)
    assert list(listed) == [[small.pk]]
    assert Workload.objects.get(pk=small.pk).parked_release == parked_before < count
    assert parking.now(gpu_queues.pk).of(small)
    assert small.pk not in [
        row[0] for row in cached_rows(parking.counted(gpu_queues.pk, at(seconds=1)))
    ]

    runtime.unpark(gpu_queues, at(seconds=1))
    count = parking.counted(gpu_queues.pk, at(seconds=2))
    assert [row for row in cached_rows(count) if row[0] == small.pk][0] is requeued
    assert not ParkedSet.objects.filter(cluster_id=gpu_queues.pk).exists()  # its count passed


def test_a_parking_change_after_another_change_reads_the_row(gpu_queues, unverified):
    submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    small = submit(gpu_queues, "small", gpus=2)
    admission.admit_pending(gpu_queues, at())

    count = parking.releases(gpu_queues.pk)
    Workload.objects.filter(pk=small.pk).update(priority=small.priority + 5, parked_release=None)
    Workload.objects.filter(pk=small.pk).update(parked_release=count)
    Workload.objects.filter(pk=small.pk).update(parked_release=count - 1)
    rows = admission_cache.active_rows(gpu_queues, HEADS_PER_QUEUE, count)

    assert rows == query_active_rows(gpu_queues, HEADS_PER_QUEUE, count)
    assert [row[4] for row in rows if row[0] == small.pk] == [small.priority + 5]


def test_a_what_if_leaves_nothing_in_the_cache(gpu_queues):
    """A what-if admits in a transaction it rolls back: the workload it imagined must not stay
    in the cache (on PostgreSQL, whose ids are not given back, it stayed there as a phantom)."""
    submit(gpu_queues, "big", gpus=4)
    admission.admit_pending(gpu_queues, at())
    imagined = job("imagined", pods=1, gpus=2)
    whatif.whatif(gpu_queues, imagined, "imagined.yaml", at(seconds=1), namespace=NAMESPACE)
    small = submit(gpu_queues, "small", gpus=2)

    decisions = admission.admit_pending(gpu_queues, at(seconds=2))  # verified: no drift

    assert [a.workload for a in decisions.admitted] == [f"{NAMESPACE}/{small.name}"]


def test_a_run_rolled_back_is_not_trusted_though_its_batch_number_is_taken_again(
    gpu_queues, unverified
):
    """This worker's run is rolled back; the other worker's next run takes the same batch
    number, for changes this one never saw: it must not take them as read."""
    other = _Worker()
    big = submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    small = submit(gpu_queues, "small", gpus=2)
    with transaction.atomic():
        admission.admit_pending(gpu_queues, at(seconds=1))  # batch 2, `small` waits
        transaction.set_rollback(True)
    runtime.finish([big], at(), Workload.Phase.FINISHED)
    other.admit(gpu_queues, at(seconds=2))  # batch 2 again: `big` finished, `small` admitted

    decisions = admission.admit_pending(gpu_queues, at(seconds=3))

    assert not decisions.admitted
    assert _same_as_the_database(gpu_queues)
    assert Workload.objects.get(pk=small.pk).phase == Workload.Phase.ADMITTED


def test_a_run_that_fails_half_way_is_not_trusted(gpu_queues, monkeypatch):
    """A run requeues the parked workloads in memory (capacity was released), then fails
    reading the changed rows (a cancelled statement, a lost connection): the database takes
    the counted release back, and the next run must not trust what the failed one left in
    memory."""
    big = submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    small = submit(gpu_queues, "small", gpus=2)
    admission.admit_pending(gpu_queues, at(seconds=1))
    admission.admit_pending(gpu_queues, at(seconds=2))

    def cancelled(pks, releases, *extra):
        raise OperationalError("canceling statement due to statement timeout")

    def failing_run():
        with transaction.atomic():
            runtime.unpark(gpu_queues, at(seconds=2))  # `small` back in its queue, in memory
            Workload.objects.filter(pk=big.pk).update(priority=big.priority + 1)  # to read
            monkeypatch.setattr(admission_cache, "read_rows_by_pk", cancelled)
            admission.admit_pending(gpu_queues, at(seconds=3))

    with pytest.raises(OperationalError):
        failing_run()
    monkeypatch.undo()
    small.refresh_from_db()
    assert parking.now(gpu_queues.pk).of(small)

    admission.admit_pending(gpu_queues, at(seconds=4))  # verified against the database
