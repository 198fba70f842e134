"""Parked (inadmissible) workloads and releases of capacity (workloads/parking.py)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from clusters.models import Cluster
from tests.support import NAMESPACE, at, submit
from workloads import admission, explain, parking, runtime, services
from workloads.models import CapacityRelease, ParkedSet, Workload, WorkloadChange

# A second LocalQueue of gpu-queue, and a stopped one.
SECOND_QUEUES = f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: team-b, namespace: {NAMESPACE}}}
spec: {{clusterQueue: gpu-queue}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: team-stopped, namespace: {NAMESPACE}}}
spec: {{clusterQueue: gpu-queue, stopPolicy: Hold}}
"""


def _parked(row: Workload) -> bool:
    row.refresh_from_db()
    return bool(explain.explain(row, at(seconds=5))["pending"]["parked"])


def test_releases_are_rows_that_one_run_a_second_after_the_first_counts_as_one_requeue(
    gpu_queues,
):
    """Kueue requeues inadmissible workloads a batch period (one second) after a release it
    has not requeued yet, with every release made meanwhile (`requeueBatchPeriod`)."""
    big = submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    waiting = [submit(gpu_queues, name, gpus=2) for name in ("first", "second")]
    admission.admit_pending(gpu_queues, at(seconds=1))
    assert [_parked(row) for row in waiting] == [True, True]
    before, changes = parking.releases(gpu_queues.pk), WorkloadChange.objects.count()

    runtime.unpark(gpu_queues, at(seconds=1.5))  # a queue changed, say
    runtime.unpark(gpu_queues, at(seconds=2))

    assert CapacityRelease.objects.count() == 2
    assert WorkloadChange.objects.count() == changes, "no workload row changed"
    assert runtime.next_event_at(gpu_queues) == at(seconds=2.5), "the clock stops there"
    # Before then, the parked workloads wait for their batch, to readers and to a run.
    assert [_parked(row) for row in waiting] == [True, True]
    decisions = admission.admit_pending(gpu_queues, at(seconds=2.4))
    assert not decisions.pending
    assert CapacityRelease.objects.count() == 2

    # The run at the batch's end counts both notes as one requeue; `big` holds the GPUs: the
    # two are nominated, and parked again.
    decisions = admission.admit_pending(gpu_queues, at(seconds=2.5))
    assert [p.parked for p in decisions.pending] == [True, True]
    assert not CapacityRelease.objects.exists()
    assert parking.releases(gpu_queues.pk) == before + 1
    assert parking.next_requeue(gpu_queues.pk) is None

    runtime.finish([big], at(seconds=3), Workload.Phase.FINISHED)
    assert not admission.admit_pending(gpu_queues, at(seconds=3)).admitted
    decisions = admission.admit_pending(gpu_queues, at(seconds=4))
    assert sorted(a.workload for a in decisions.admitted) == sorted(
        f"{NAMESPACE}/{row.name}" for row in waiting
    )


def test_a_release_with_nothing_parked_does_not_stop_the_clock(gpu_queues):
    submit(gpu_queues, "fits", gpus=2)
    admission.admit_pending(gpu_queues, at())

    runtime.unpark(gpu_queues, at())

    assert CapacityRelease.objects.exists()
    assert parking.next_requeue(gpu_queues.pk) is None


def test_the_beat_counts_releases_no_run_reads(gpu_queues):
    """A real cluster's admission is Kueue's: no run counts its releases, and the notes of
    its finishes must not pile up."""
    Cluster.objects.filter(pk=gpu_queues.pk).update(provider=Cluster.Provider.GKE)
    before = parking.releases(gpu_queues.pk)
    for _ in range(3):  # finishes the watch mirrored, a second ago and more
        runtime.unpark(gpu_queues, timezone.now() - parking.REQUEUE_BATCH)

    admission.tick_live()  # advances simulated clusters only

    assert not CapacityRelease.objects.exists()
    assert parking.releases(gpu_queues.pk) == before + 1


def test_workloads_parked_again_are_listed_in_one_set_that_every_reader_counts(gpu_queues):
    """The runs after a requeue park most workloads again: one set of the count lists them,
    their rows keep their older counts, and readers, the clock and the cache still see them
    parked, until the next requeue, which deletes the set."""
    big = submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    waiting = [submit(gpu_queues, name, gpus=2) for name in ("first", "second")]
    admission.admit_pending(gpu_queues, at(seconds=1))
    counts = {
        row.pk: row.parked_release
        for row in Workload.objects.filter(pk__in=[w.pk for w in waiting])
    }
    runtime.unpark(gpu_queues, at(seconds=1))
    changes = WorkloadChange.objects.count()

    decisions = admission.admit_pending(gpu_queues, at(seconds=2))  # requeued, parked again

    assert [p.parked for p in decisions.pending] == [True, True]
    (listed,) = ParkedSet.objects.filter(cluster_id=gpu_queues.pk)
    assert (sorted(listed.workloads), listed.release) == (
        sorted(counts),
        parking.releases(gpu_queues.pk),
    )
    assert WorkloadChange.objects.count() == changes + 1, "one change names the set"
    assert {
        row.pk: row.parked_release for row in Workload.objects.filter(pk__in=counts)
    } == counts, "no row was written"
    assert [_parked(row) for row in waiting] == [True, True]
    assert not admission.admit_pending(gpu_queues, at(seconds=2)).pending, "none tried again"
    runtime.unpark(gpu_queues, at(seconds=2))
    assert runtime.next_event_at(gpu_queues) == at(seconds=3), "the clock stops for them"

    # Whatever clears a workload's count takes it out of the inadmissible set, listed or not.
    Workload.objects.filter(pk=waiting[0].pk).update(parked_release=None)
    assert [_parked(row) for row in waiting] == [False, True]

    runtime.finish([big], at(seconds=2.5), Workload.Phase.FINISHED)
    admission.admit_pending(gpu_queues, at(seconds=3))
    assert not ParkedSet.objects.exists(), "its count passed"
    assert all(
        row.phase != Workload.Phase.PENDING for row in Workload.objects.filter(pk__in=counts)
    )


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no-cache"])
def test_a_run_parks_every_queued_workload_of_a_shape_it_found_inadmissible(
    gpu_queues, settings, cache
):
    """Kueue's SchedulingEquivalenceHashing moves every pending workload of the ClusterQueue
    with the shape of one found inadmissible to the inadmissible set, not only the heads a
    run loads (two per LocalQueue here): those past the window, in any of the ClusterQueue's
    LocalQueues, but no other shape, and none of a stopped LocalQueue."""
    settings.ADMISSION_CACHE = cache
    services.apply(gpu_queues, SECOND_QUEUES, source="queues.yaml", now=at())
    submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    same = [submit(gpu_queues, f"same-{i}", gpus=2) for i in range(5)]
    other = submit(gpu_queues, "x-other", gpus=4)  # queued behind them
    same += [submit(gpu_queues, f"team-b-{i}", gpus=2, queue="team-b") for i in range(3)]
    stopped = submit(gpu_queues, "stopped", gpus=2, queue="team-stopped")

    decisions = admission.admit_pending(gpu_queues, at(seconds=1), heads_per_queue=2)

    window = [same[0], same[1], same[5], same[6]]
    assert {p.workload for p in decisions.pending if p.parked} == {str(row) for row in window}
    assert [_parked(row) for row in same] == [True] * 8
    head = next(p for p in decisions.pending if p.workload == str(same[0]))
    assert {(row.pending_reason, row.pending_message) for row in same} == {
        (head.reason.value, head.message)
    }
    assert not _parked(other)
    assert not _parked(stopped)
    # The next run loads and nominates the other shape alone.
    decisions = admission.admit_pending(gpu_queues, at(seconds=1), heads_per_queue=2)
    assert [(p.workload, p.parked) for p in decisions.pending] == [(str(other), True)]
