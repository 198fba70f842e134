"""A release of capacity that commits while an admission run decides must requeue what that run
parks: Kueue requeues, rather than parks, a workload its scheduler popped before a requeue it
had not seen (here the first run a second after the release). When a release cleared the parked
rows, it missed the row the run was parking (still unparked when the release ran): the workload
stayed parked, capacity free, until some other release (workloads/parking.py)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from tests.integration.workers import InThread
from tests.support import NAMESPACE, at, submit
from workloads import admission, parking, runtime
from workloads.models import CapacityRelease, Workload

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="SQLite runs one writer at a time: a release cannot commit during a run",
    ),
]


def test_a_release_committed_while_a_run_decides_requeues_what_the_run_parks(
    gpu_queues, monkeypatch
):
    big = submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at(seconds=1))  # the queues' own releases counted too
    small = submit(gpu_queues, "small", gpus=2)
    decided, go_on = threading.Event(), threading.Event()
    write = admission._Writer.write

    def write_once_released(writer, decisions, mates):  # `small` does not fit: the run parks it
        decided.set()
        assert go_on.wait(10)
        write(writer, decisions, mates)

    monkeypatch.setattr(admission._Writer, "write", write_once_released)
    run = InThread(lambda: admission.admit_pending(gpu_queues, at(seconds=2)))
    run.start()
    assert decided.wait(10)

    def finish_big():  # a request or a watch, meanwhile: `big` ends, its quota is free
        with transaction.atomic():
            row = Workload.objects.select_related("owner", "cluster").get(pk=big.pk)
            runtime.finish([row], at(seconds=2), Workload.Phase.FINISHED)

    finishing = InThread(finish_big)
    finishing.start()
    finishing.join(10)
    assert CapacityRelease.objects.count() == 1, "noted for the next run: the lock is held"
    go_on.set()
    run.join(10)
    assert (run.error, finishing.error) == (None, None)
    small.refresh_from_db()
    assert small.parked_release is not None  # parked by the run, at the count it read
    monkeypatch.undo()

    decisions = admission.admit_pending(gpu_queues, at(seconds=3))  # the requeue's batch ends

    assert [a.workload for a in decisions.admitted] == [f"{NAMESPACE}/{small.name}"]
    small.refresh_from_db()
    assert not parking.now(gpu_queues.pk).of(small)
    assert not CapacityRelease.objects.exists()
