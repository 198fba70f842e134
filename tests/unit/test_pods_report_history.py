"""A round's `workload.pods` reports compare each owner's pod counts with its latest report
(live._last_reported): only that event is read, however many the owner had before (a
long-lived Deployment has one per change of its pods).

Shown by the database's work for the query itself, not by timing it: on SQLite the virtual
machine's steps, on PostgreSQL the pages the query read, for an owner with a long history and
for one with none."""

from __future__ import annotations

from typing import Any

from django.db import connection

from clusters.models import Cluster
from events.models import Event
from events.services import number_events
from tests.plans import pages, statements_of
from tests.support import NAMESPACE, at, deployment
from workloads import admission, live, services

HISTORY = 5000


def test_an_owners_older_pod_reports_are_not_read_to_find_its_latest(gpu_queues):
    for name in ("young", "old"):
        services.apply(
            gpu_queues,
            deployment(name, replicas=1, gpus=1),
            source="w.yaml",
            now=at(),
            namespace=NAMESPACE,
        )
    young, old = (f"Deployment/{NAMESPACE}/{name}" for name in ("young", "old"))
    add_pods_history(gpu_queues, old, HISTORY)
    admission.advance(gpu_queues, at(), at(minutes=1))

    latest = live._last_reported(gpu_queues, [young, old])
    assert latest[old]["running"] == latest[young]["running"] == 1  # this round's, not history's
    assert work(gpu_queues, old) == work(gpu_queues, young)


def add_pods_history(cluster: Cluster, key: str, count: int) -> None:
    """`count` `workload.pods` events of `key` without pods, as a Deployment scaled to zero and
    back again and again leaves them."""
    Event.objects.bulk_create(
        Event(
            kind=live.PODS,
            at=at(seconds=-count + i),
            cluster=cluster.name,
            namespace=NAMESPACE,
            object_key=key,
            message="0 of 0 pods running, 0 ready, 0 bound to nodes",
            data=dict.fromkeys((*live.COUNTS, *live.CHANGES), 0),
        )
        for i in range(count)
    )
    number_events()  # as their commits would have
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE events_event")  # plans as a server's statistics choose them


def work(cluster: Cluster, key: str) -> int:
    """What `live._last_reported`'s queries of `key` cost the database: SQLite's virtual
    machine steps, PostgreSQL's buffer pages (cached or not)."""
    statements = statements_of(lambda: live._last_reported(cluster, [key]))
    return sum(cost(sql, params) for sql, params in statements)


def cost(sql: str, params: Any) -> int:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            steps = 0

            def step() -> int:
                nonlocal steps
                steps += 1
                return 0  # go on

            connection.connection.set_progress_handler(step, 1)
            try:
                cursor.execute(sql, params)
                cursor.fetchall()
            finally:
                connection.connection.set_progress_handler(None, 1)
            return steps
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
        return pages(cursor.fetchone()[0][0]["Plan"])
