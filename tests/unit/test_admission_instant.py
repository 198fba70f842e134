"""An admission run at an instant decides on the workloads queued by then, never on later ones.

A worker's settle runs all its rounds at the instant it began. Submissions that committed while
it ran were admitted before they were queued (623 of 800 in `benchmarks/api_load.py`, by up to
1.4 s), a few at each round, every round a whole admission run. Their commits queue the next
settle, which admits them at its own instant."""

from __future__ import annotations

import pytest

from tests.support import NAMESPACE, at, job
from workloads import admission, services
from workloads.models import Workload


def _submit(cluster, name, seconds):
    """A job of one pod of one GPU (the ClusterQueue holds six), queued at `seconds`."""
    services.apply(
        cluster,
        job(name, pods=1, gpus=1),
        source="job.yaml",
        now=at(seconds),
        namespace=NAMESPACE,
        admit=services.Admit.SKIP,
    )
    return Workload.objects.get(owner__name=name)


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no-cache"])
def test_a_settle_admits_only_the_workloads_queued_by_its_instant(gpu_queues, settings, cache):
    settings.ADMISSION_CACHE = cache
    early = _submit(gpu_queues, "early", 0)
    late = _submit(gpu_queues, "late", 10)

    admission.settle(gpu_queues, at(5))

    early.refresh_from_db()
    late.refresh_from_db()
    assert (early.phase, early.admitted_at) == (Workload.Phase.ADMITTED, at(5))
    # Neither admitted nor given a reason to wait: no run has looked at it yet.
    assert (late.phase, late.admitted_at, late.pending_reason) == (Workload.Phase.PENDING, None, "")

    admission.settle(gpu_queues, at(10))

    late.refresh_from_db()
    assert (late.phase, late.admitted_at) == (Workload.Phase.ADMITTED, at(10))


def test_submissions_committed_during_a_settle_are_left_to_the_next(gpu_queues, monkeypatch):
    runs = []
    admit_pending = admission.admit_pending

    def admit_while_requests_commit(cluster, now, *args, **kwargs):
        decisions = admit_pending(cluster, now, *args, **kwargs)
        runs.append(now)
        _submit(cluster, f"arrival-{len(runs)}", 6)  # a request's commit, after the settle began
        return decisions

    monkeypatch.setattr(admission, "admit_pending", admit_while_requests_commit)
    _submit(gpu_queues, "first", 0)

    admission.settle(gpu_queues, at(5))

    # One run: the simulated cluster's round that started the pod of `first` asks for another
    # round, but nothing queued by at(5) waits for admission.
    assert runs == [at(5)]
    admitted = Workload.objects.filter(phase=Workload.Phase.ADMITTED)
    assert [row.owner.name for row in admitted] == ["first"]
