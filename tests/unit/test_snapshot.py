"""`snapshot.load` is the only ORM -> scheduler translator and runs a fixed number of queries."""

from __future__ import annotations

import pytest

import scheduler as s
from tests.support import NAMESPACE, at, deployment, job
from workloads import parking, services, snapshot
from workloads.models import KubeObject, LocalQueue, ParkedSet, Workload

# The queue objects' stamp (they are kept: the submission's admission run read them) and the
# Workloads (no TAS flavor, so no Nodes or bound Pods).
SNAPSHOT_QUERIES = 2


@pytest.mark.parametrize("replicas", [2, 50])
def test_load_runs_the_same_number_of_queries_for_any_number_of_workloads(
    gpu_queues, django_assert_num_queries, replicas, settings
):
    settings.ADMISSION_CACHE_VERIFY = False  # which reads the queue objects again
    text = "---\n".join([deployment(replicas=replicas), job(pods=2)])
    services.apply(gpu_queues, text, source="w.yaml", now=at(), namespace=NAMESPACE)
    assert Workload.objects.count() == replicas + 1

    releases = parking.releases(gpu_queues.pk)  # as admission counts them, first
    with django_assert_num_queries(SNAPSHOT_QUERIES):
        loaded = snapshot.load(gpu_queues, releases=releases)

    assert loaded.snapshot.workloads
    assert set(loaded.snapshot.cluster_queues) == {"gpu-queue"}


GPU_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: plain}
"""
FAIR_QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: org}
spec: {fairSharing: {weight: 3}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: fair}
spec:
  cohortName: org
  fairSharing: {weight: 500m}
  flavorFungibility: {whenCanBorrow: TryNextFlavor, whenCanPreempt: TryNextFlavor,
                      preference: PreemptionOverBorrowing}
"""


def test_load_passes_fair_sharing_weights_and_fungibility_preference(cluster):
    """Kueue's cache reads `fairSharing.weight` of ClusterQueues and Cohorts (default 1:
    pkg/cache/scheduler/fair_sharing.go `parseFairWeight`) and the ClusterQueue's
    `flavorFungibility.preference`."""
    services.apply(cluster, FAIR_QUEUES, source="fair.yaml", now=at())
    services.apply(cluster, GPU_QUEUE, source="gpu.yaml", now=at())
    loaded = snapshot.load(cluster).snapshot
    fair = loaded.cluster_queues["fair"]
    assert (fair.fair_weight, loaded.cohorts["org"].fair_weight) == (0.5, 3.0)
    assert fair.flavor_fungibility.preference is s.FungibilityPreference.PREEMPTION_OVER_BORROWING
    assert loaded.cluster_queues["plain"].fair_weight == 1.0
    assert loaded.cluster_queues["plain"].flavor_fungibility.preference is None


def test_conversions_are_reused_and_kept_only_for_the_recent_runs(gpu_queues, monkeypatch):
    """Workloads that did not change are converted once, and what is kept between runs is
    the rows of the recent runs (two sweeps' worth): a worker's memory follows them, not every
    row it saw."""
    monkeypatch.setattr(snapshot, "CONVERSIONS_SWEPT_EVERY", 4)
    services.apply(gpu_queues, job("stays", pods=1), source="a.yaml", now=at(), namespace=NAMESPACE)
    first = {w.key: w for w in snapshot.load(gpu_queues).snapshot.workloads}
    gone = []
    for i in range(20):  # submitted, then deleted: never active in a later run
        name = f"gone-{i}"
        services.apply(
            gpu_queues, job(name, pods=1), source="b.yaml", now=at(i), namespace=NAMESPACE
        )
        snapshot.load(gpu_queues)
        gone.append(Workload.objects.get(name__startswith=f"job-{name}").pk)
        services.delete(KubeObject.objects.get(name=name), at(i))

    last = {w.key: w for w in snapshot.load(gpu_queues).snapshot.workloads}

    (stays,) = first
    assert last.keys() == {stays}
    assert last[stays] is first[stays]
    kept = snapshot._converted[gpu_queues.pk]
    assert kept.runs > 40  # admission's runs after each change, and these
    # At most the rows of the last eight runs: the last few jobs, not the first.
    kept_pks = kept.recent.keys() | kept.older.keys()
    assert Workload.objects.get(name__startswith="job-stays").pk in kept_pks
    assert kept_pks & set(gone[:15]) == set()

    # A changed row, and the same row under another ClusterQueue, are converted again.
    Workload.objects.filter(name__startswith="job-stays").update(priority=7)
    (changed,) = snapshot.load(gpu_queues).snapshot.workloads
    assert (changed.key, changed.priority) == (stays, 7)
    LocalQueue.objects.filter(cluster=gpu_queues).update(cluster_queue_name="elsewhere")
    (moved,) = snapshot.load(gpu_queues).snapshot.workloads
    assert (moved.priority, moved.cluster_queue) == (7, "elsewhere")


def test_rows_read_by_key_in_sql_are_the_rows_the_orm_reads(gpu_queues):
    """The admission cache reads changed rows in SQL (`read_rows_by_pk`): the same values of
    the same types as `read_rows`, datetimes aware, `parked` at the count it is given, by a
    row's own count or, while it has one, a set of the count."""
    text = "---\n".join([deployment(replicas=3), job(pods=2)])
    services.apply(gpu_queues, text, source="w.yaml", now=at(), namespace=NAMESPACE)
    rows = list(Workload.objects.order_by("pk"))
    Workload.objects.filter(pk=rows[0].pk).update(parked_release=4, requeue_at=at(minutes=3))
    Workload.objects.filter(pk=rows[1].pk).update(parked_release=2)
    Workload.objects.filter(pk=rows[2].pk).update(parked_release=1)
    Workload.objects.filter(pk=rows[3].pk).update(parked_release=None)
    listed = [rows[2].pk, rows[3].pk]  # the last without a count of its own: not parked
    ParkedSet.objects.create(cluster_id=gpu_queues.pk, release=3, workloads=listed)
    pks = [row.pk for row in rows]
    assert any(row.quota_reserved_at for row in Workload.objects.all())  # admitted: times too

    for releases in (2, 3, 5):
        parked = parking.Parked(gpu_queues.pk, releases)
        by_orm = snapshot.read_rows(Workload.objects.filter(pk__in=pks), parked, "requeue_at")
        by_sql = snapshot.read_rows_by_pk(pks, parked, "requeue_at")

        assert by_sql == by_orm
        assert [list(map(type, row)) for row in by_sql] == [list(map(type, r)) for r in by_orm]
        expected = [releases <= 4, releases <= 2, releases <= 3, False]
        assert [row[snapshot.PARKED] for row in by_sql] == expected
        assert all(row[5].utcoffset() is not None for row in by_sql)  # queued_at, aware


def _local_queue(stop_policy: str) -> str:
    return f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: team-llm, namespace: {NAMESPACE}}}
spec: {{clusterQueue: gpu-queue, stopPolicy: {stop_policy}}}
"""


def test_a_row_kept_as_it_was_follows_its_local_queue_on_hold_and_back(gpu_queues):
    """Conversions are reused by the row's identity only while the LocalQueues are as they
    were: the very same row is held back once its LocalQueue is on hold, and scheduled again
    once it is started, though the row itself never changed."""
    services.apply(
        gpu_queues,
        job("waits", pods=1),
        source="a.yaml",
        now=at(),
        namespace=NAMESPACE,
        admit=services.Admit.SKIP,
    )
    rows = snapshot.query_active_rows(gpu_queues, snapshot.HEADS_PER_QUEUE, 0)

    def scheduled_and_held() -> tuple[list[str], list[s.PendingReason]]:
        loaded = snapshot.load(gpu_queues, active_rows=lambda *_: rows, releases=0)
        return [w.key for w in loaded.snapshot.workloads], [p.reason for p in loaded.held]

    (key,), held = scheduled_and_held()
    assert held == []
    for policy, expected in (
        ("Hold", ([], [s.PendingReason.LOCAL_QUEUE_STOPPED])),
        ("None", ([key], [])),
    ):
        services.apply(
            gpu_queues,
            _local_queue(policy),
            source="lq.yaml",
            now=at(),
            admit=services.Admit.SKIP,
        )
        assert scheduled_and_held() == expected
