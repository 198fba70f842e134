"""Admission keeps a cluster's converted queue objects between runs, and reads them again only
when the cluster's `QueueGeneration` changed: a stamp database triggers renew at every write
to the queue objects admission reads, whoever writes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters.models import Cluster
from tests.support import GPU_QUEUES, NAMESPACE, at, job
from workloads import admission, services, snapshot
from workloads.models import (
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    Configuration,
    LocalQueue,
    QueueGeneration,
    ResourceFlavor,
    Topology,
    Workload,
)

# Every table `snapshot.queue_specs` reads.
READ_BY_ADMISSION = [
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    Configuration,
    LocalQueue,
    ResourceFlavor,
    Topology,
]
# The stamp; the Configuration, AdmissionChecks, ClusterQueues, Cohorts, ResourceFlavors and
# LocalQueues (no topology-aware flavor, so no Topologies).
READ_AGAIN = 7


def _stamp(cluster: Cluster) -> int | None:
    return (
        QueueGeneration.objects.filter(cluster_id=cluster.pk)
        .values_list("generation", flat=True)
        .first()
    )


def _raw(sql: str, *params: object) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.mark.parametrize("model", READ_BY_ADMISSION, ids=lambda m: m.KIND)
def test_every_write_to_a_queue_table_renews_the_stamp_even_in_plain_sql(cluster, model):
    """Fails if a migration that rebuilt the table on SQLite dropped its triggers."""
    table = model._meta.db_table
    stamps = [_stamp(cluster)]
    fields = {"namespace": NAMESPACE, "cluster_queue_name": "q"} if model is LocalQueue else {}
    row = model.objects.create(
        cluster=cluster, name="one", created_at=at(), updated_at=at(), **fields
    )
    stamps.append(_stamp(cluster))
    _raw(f"UPDATE {table} SET name = %s WHERE id = %s", "two", row.pk)  # noqa: S608
    stamps.append(_stamp(cluster))
    _raw(f"DELETE FROM {table} WHERE id = %s", row.pk)  # noqa: S608
    stamps.append(_stamp(cluster))

    assert stamps[0] is None  # the bare cluster has no queue objects
    assert None not in stamps[1:]
    assert len(set(stamps)) == 4  # each write a new stamp


def test_the_stamp_is_the_clusters_own(gpu_queues):
    other = Cluster.objects.create(name="other", status=Cluster.Status.RUNNING)
    before = _stamp(gpu_queues)
    services.apply(
        other,
        "kind: ResourceFlavor\napiVersion: kueue.x-k8s.io/v1beta2\nmetadata: {name: a100}\n",
        source="rf.yaml",
        now=at(),
    )
    assert _stamp(gpu_queues) == before
    assert _stamp(other) is not None


def test_unchanged_queue_objects_cost_one_query_and_are_not_converted_again(gpu_queues, settings):
    settings.ADMISSION_CACHE_VERIFY = False  # which the tests turn on: it reads them again
    first = snapshot.queue_specs(gpu_queues)
    with CaptureQueriesContext(connection) as queries:
        again = snapshot.queue_specs(gpu_queues)
    assert again is first
    assert len(queries) == 1


def test_a_write_by_anyone_shows_at_the_next_read(gpu_queues):
    """Here in plain SQL, as another process or a bulk update would write it."""
    before = snapshot.queue_specs(gpu_queues)
    assert "team-llm" not in {name for _, name in before.stopped}
    _raw(
        "UPDATE workloads_localqueue SET spec = %s WHERE name = %s",
        '{"stop_policy": "Hold"}',
        "team-llm",
    )
    with CaptureQueriesContext(connection) as queries:
        after = snapshot.queue_specs(gpu_queues)
    assert (NAMESPACE, "team-llm") in after.stopped
    assert len(queries) == READ_AGAIN


def test_admission_sees_a_quota_changed_between_runs(gpu_queues):
    """gpu-queue holds 6 GPUs: the third 2-GPU pod set waits for the quota raised to 8."""
    for i in range(4):
        services.apply(
            gpu_queues, job(f"train-{i}", pods=1), source="j.yaml", now=at(), namespace=NAMESPACE
        )
    admission.admit_pending(gpu_queues, at())
    assert Workload.objects.filter(phase=Workload.Phase.ADMITTED).count() == 3

    (queue,) = [doc for doc in GPU_QUEUES.split("---\n") if "kind: ClusterQueue" in doc]
    raised = queue.replace("nominalQuota: 6", "nominalQuota: 8")
    services.apply(gpu_queues, raised, source="cq.yaml", now=at(1))
    admission.admit_pending(gpu_queues, at(1))

    assert Workload.objects.filter(phase=Workload.Phase.ADMITTED).count() == 4


def test_verify_mode_fails_on_kept_specs_the_database_does_not_hold(gpu_queues, settings):
    settings.ADMISSION_CACHE_VERIFY = True
    kept = snapshot.queue_specs(gpu_queues)
    # As if a write had changed the queues without renewing the stamp.
    stamp, _ = snapshot._queues_kept.kept[gpu_queues.pk]
    stopped = replace(kept, stopped=frozenset({(NAMESPACE, "team-llm")}))
    snapshot._queues_kept.kept[gpu_queues.pk] = (stamp, stopped)
    with pytest.raises(snapshot.QueueSpecsDrift, match="team-llm"):
        snapshot.queue_specs(gpu_queues)
    assert snapshot.queue_specs(gpu_queues) == kept  # read again, and kept again


def test_with_the_admission_cache_off_they_are_read_every_time(gpu_queues, settings):
    settings.ADMISSION_CACHE = False
    snapshot.queue_specs(gpu_queues)
    with CaptureQueriesContext(connection) as queries:
        snapshot.queue_specs(gpu_queues)
    assert len(queries) == READ_AGAIN


def test_a_deleted_clusters_stamp_and_specs_are_forgotten(gpu_queues):
    snapshot.queue_specs(gpu_queues)
    pk = gpu_queues.pk
    gpu_queues.delete()
    assert not QueueGeneration.objects.filter(cluster_id=pk).exists()
    assert pk not in snapshot._queues_kept.kept
