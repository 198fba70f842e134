"""The admission cache: every writer's change reaches it, and it admits exactly as the database.

Both databases: CI runs this file on SQLite and on PostgreSQL, whose triggers differ
(migration workloads/0011).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.support import NAMESPACE, at, job
from workloads import admission, admission_cache, runtime, services
from workloads.models import AdmissionCacheOwner, Workload, WorkloadChange
from workloads.snapshot import HEADS_PER_QUEUE, query_active_rows


def _changes(cluster) -> list[int]:
    return sorted(
        WorkloadChange.objects.filter(cluster_id=cluster.pk).values_list("workload_id", flat=True)
    )


def _submit(cluster, name, gpus):
    services.apply(
        cluster,
        job(name, pods=1, gpus=gpus),
        source=f"{name}.yaml",
        now=at(),
        namespace=NAMESPACE,
        admit=services.Admit.SKIP,
    )
    return Workload.objects.get(cluster=cluster, owner__name=name)


@pytest.fixture
def unverified(settings):
    """The cache alone, as in production: a missed change shows as a wrong decision."""
    settings.ADMISSION_CACHE_VERIFY = False


def test_the_triggers_note_inserts_deletes_and_changes_to_what_admission_reads(gpu_queues):
    WorkloadChange.objects.all().delete()
    row = _submit(gpu_queues, "noted", gpus=2)
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
    _submit(gpu_queues, "running", gpus=2)
    admission.admit_pending(gpu_queues, at())
    assert AdmissionCacheOwner.objects.filter(cluster_id=gpu_queues.pk).exists()
    _submit(gpu_queues, "waiting", gpus=2)  # a change no run consumed yet
    cluster_id = gpu_queues.pk

    gpu_queues.delete()

    assert not WorkloadChange.objects.filter(cluster_id=cluster_id).exists()
    assert not AdmissionCacheOwner.objects.filter(cluster_id=cluster_id).exists()
    assert cluster_id not in admission_cache._clusters


def test_a_write_behind_admissions_back_is_read_by_its_next_run(gpu_queues, unverified):
    """The ClusterQueue has 6 GPUs. `big` takes them; `small` waits. Then a writer other than
    admission (here the ORM, as a watch or the API would) finishes `big`: the cached queues must
    learn of it, or `small` waits for quota that is free."""
    big = _submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    small = _submit(gpu_queues, "small", gpus=2)
    admission.admit_pending(gpu_queues, at())
    big.refresh_from_db()
    small.refresh_from_db()
    assert (big.phase, small.phase) == (Workload.Phase.ADMITTED, Workload.Phase.PENDING)

    runtime.finish([big], at(), Workload.Phase.FINISHED)
    decisions = admission.admit_pending(gpu_queues, at(seconds=1))

    assert [a.workload for a in decisions.admitted] == [f"{NAMESPACE}/{small.name}"]


def test_changes_another_process_consumed_make_this_one_read_everything(gpu_queues, unverified):
    """Two workers take turns on the admission lock. The other one's cache consumed the change
    rows, so this process cannot learn from them: the owner token tells it to read it all."""
    big = _submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    small = _submit(gpu_queues, "small", gpus=2)
    admission.admit_pending(gpu_queues, at())

    runtime.finish([big], at(), Workload.Phase.FINISHED)
    WorkloadChange.objects.all().delete()
    AdmissionCacheOwner.objects.filter(cluster_id=gpu_queues.pk).update(token="another-worker")
    decisions = admission.admit_pending(gpu_queues, at(seconds=1))

    assert [a.workload for a in decisions.admitted] == [f"{NAMESPACE}/{small.name}"]


def test_verification_fails_when_the_cache_and_the_database_disagree(gpu_queues):
    big = _submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    _submit(gpu_queues, "small", gpus=2)
    # A change no trigger saw: the cache loses `big`, and no change row tells it to read it.
    admission_cache._clusters[gpu_queues.pk].forget(big.pk)
    WorkloadChange.objects.filter(workload_id=big.pk).delete()

    with pytest.raises(admission_cache.CacheDrift, match=f"1 workloads: {big.pk}: cache None"):
        admission.admit_pending(gpu_queues, at(seconds=1))

    # The drifted cache is dropped: the next run reads the cluster afresh.
    admission.admit_pending(gpu_queues, at(seconds=2))


def _noted(cluster) -> list[tuple[int, bool | None]]:
    return list(
        WorkloadChange.objects.filter(cluster_id=cluster.pk)
        .order_by("pk")
        .values_list("workload_id", "parked")
    )


def test_a_change_that_only_parks_or_unparks_carries_the_new_value(gpu_queues):
    row = _submit(gpu_queues, "noted", gpus=2)
    WorkloadChange.objects.all().delete()

    Workload.objects.filter(pk=row.pk).update(parked=True)
    Workload.objects.filter(pk=row.pk).update(parked=False)
    Workload.objects.filter(pk=row.pk).update(parked=True, pending_reason="NoFit")
    Workload.objects.filter(pk=row.pk).update(priority=row.priority + 1)

    assert _noted(gpu_queues) == [(row.pk, True), (row.pk, False), (row.pk, None), (row.pk, None)]


def test_parking_and_unparking_reach_the_cache_without_reading_the_rows(gpu_queues, unverified):
    """Every release of capacity unparks the cluster's inadmissible workloads and the next run
    parks most of them again: the cache applies both from the change rows alone."""
    _submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    small = _submit(gpu_queues, "small", gpus=2)
    admission.admit_pending(gpu_queues, at())
    small.refresh_from_db()
    assert small.parked
    admission_cache.active_rows(gpu_queues, HEADS_PER_QUEUE)  # reads it: its reason is new

    def cached_rows() -> list[tuple]:
        with CaptureQueriesContext(connection) as queries:
            rows = admission_cache.active_rows(gpu_queues, HEADS_PER_QUEUE)
        assert not [q["sql"] for q in queries if 'FROM "workloads_workload"' in q["sql"]]
        assert rows == query_active_rows(gpu_queues, HEADS_PER_QUEUE)
        return rows

    runtime.unpark(gpu_queues)
    assert small.pk in [row[0] for row in cached_rows()]

    admission.admit_pending(gpu_queues, at(seconds=1))  # parked again, for the same reason
    assert _noted(gpu_queues) == [(small.pk, True)]
    assert small.pk not in [row[0] for row in cached_rows()]


def test_a_parking_change_after_another_change_reads_the_row(gpu_queues, unverified):
    _submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    small = _submit(gpu_queues, "small", gpus=2)
    admission.admit_pending(gpu_queues, at())

    Workload.objects.filter(pk=small.pk).update(priority=small.priority + 5, parked=False)
    Workload.objects.filter(pk=small.pk).update(parked=True)
    Workload.objects.filter(pk=small.pk).update(parked=False)
    rows = admission_cache.active_rows(gpu_queues, HEADS_PER_QUEUE)

    assert rows == query_active_rows(gpu_queues, HEADS_PER_QUEUE)
    assert [row[4] for row in rows if row[0] == small.pk] == [small.priority + 5]
