"""Parked (inadmissible) workloads and releases of capacity (workloads/parking.py)."""

from __future__ import annotations

from django.utils import timezone

from clusters.models import Cluster
from tests.support import NAMESPACE, at, submit
from workloads import admission, explain, parking, runtime
from workloads.models import CapacityRelease, Workload, WorkloadChange


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
