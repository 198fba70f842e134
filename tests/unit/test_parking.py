"""Parked (inadmissible) workloads and releases of capacity (workloads/parking.py)."""

from __future__ import annotations

from clusters.models import Cluster
from tests.support import NAMESPACE, at, submit
from workloads import admission, explain, parking, runtime
from workloads.models import CapacityRelease, Workload, WorkloadChange


def _parked(row: Workload) -> bool:
    row.refresh_from_db()
    return bool(explain.explain(row, at(seconds=5))["pending"]["parked"])


def test_a_release_is_one_row_that_the_next_run_counts_and_requeues_every_parked_workload(
    gpu_queues,
):
    big = submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    waiting = [submit(gpu_queues, name, gpus=2) for name in ("first", "second")]
    admission.admit_pending(gpu_queues, at(seconds=1))
    assert [_parked(row) for row in waiting] == [True, True]
    before, changes = parking.releases(gpu_queues.pk), WorkloadChange.objects.count()

    runtime.unpark(gpu_queues)  # a queue changed, say
    runtime.unpark(gpu_queues)

    assert CapacityRelease.objects.count() == 2
    assert WorkloadChange.objects.count() == changes, "no workload row changed"
    # Readers count a noted release already: both are back in their queue.
    assert parking.releases(gpu_queues.pk) == before + 1
    assert [_parked(row) for row in waiting] == [False, False]

    # The next run counts both notes as one requeue; `big` holds the GPUs: parked again.
    decisions = admission.admit_pending(gpu_queues, at(seconds=2))
    assert [p.parked for p in decisions.pending] == [True, True]
    assert not CapacityRelease.objects.exists()
    assert parking.releases(gpu_queues.pk) == before + 1
    runtime.finish([big], at(seconds=3), Workload.Phase.FINISHED)
    decisions = admission.admit_pending(gpu_queues, at(seconds=3))
    assert sorted(a.workload for a in decisions.admitted) == sorted(
        f"{NAMESPACE}/{row.name}" for row in waiting
    )


def test_the_beat_counts_releases_no_run_reads(gpu_queues):
    """A real cluster's admission is Kueue's: no run counts its releases, and the notes of
    its finishes must not pile up."""
    Cluster.objects.filter(pk=gpu_queues.pk).update(provider=Cluster.Provider.GKE)
    before = parking.releases(gpu_queues.pk)
    for _ in range(3):  # finishes the watch mirrored
        runtime.unpark(gpu_queues)

    admission.tick_live()  # advances simulated clusters only

    assert not CapacityRelease.objects.exists()
    assert parking.releases(gpu_queues.pk) == before + 1
