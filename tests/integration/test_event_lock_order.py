"""On PostgreSQL the event log's lock is the last lock a transaction takes: a request that
records events and then waits for rows a worker holds must not hold it meanwhile, or the
worker, wanting it for its own events, deadlocks with the request (seen in an api_load soak:
DELETEs answered 503 and admission tasks failed)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from events.models import Event
from events.services import record_event
from tests.integration.workers import InThread
from tests.support import T0, job
from workloads import services
from workloads.models import KubeObject, Pod

pytestmark = pytest.mark.django_db(transaction=True)


def waiting_for_a_lock() -> int:
    """Backends of this database waiting for a lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            # A row lock is waited for as its holder's transaction id: no database named.
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE NOT l.granted AND a.datname = current_database()"
        )
        (count,) = cursor.fetchone()
    return int(count)


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite runs one writer at a time: no row locks"
)
def test_deleting_a_job_whose_pods_a_worker_holds_waits_without_the_event_lock(gpu_queues):
    services.apply(
        gpu_queues, job("victim", pods=2, gpus=1), source="j.yaml", now=T0, namespace="llm"
    )
    owner = KubeObject.objects.get(name="victim")
    assert Pod.objects.filter(owner=owner).count() == 2
    pods_locked, go_on = threading.Event(), threading.Event()

    def worker():  # binds the job's pods, then records what it did
        with transaction.atomic():
            Pod.objects.filter(owner=owner).update(ready=True)
            pods_locked.set()
            assert go_on.wait(10)
            record_event("pods.bound", at=T0, message="bound", cluster=gpu_queues.name)

    def request():  # DELETE /api/v1/workloads/<id>
        services.delete(owner, T0, admit=services.Admit.SKIP)

    holding = InThread(worker)
    holding.start()
    assert pods_locked.wait(10)
    deleting = InThread(request)
    deleting.start()
    deadline = time.monotonic() + 10
    while waiting_for_a_lock() == 0 and time.monotonic() < deadline:
        time.sleep(0.02)  # until the deletion waits for the pods
    go_on.set()
    holding.join(15)
    deleting.join(15)

    assert (holding.error, deleting.error) == (None, None)
    assert not KubeObject.objects.filter(pk=owner.pk).exists()
    kinds = list(Event.objects.values_list("kind", flat=True))
    assert kinds.index("pods.bound") < kinds.index("object.deleted")
