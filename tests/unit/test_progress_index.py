"""The simulator's round reads a running job's recent `workload.progress` (live.report_progress)
by an index on the object's events of a kind by time: a job's own old progress events, one per
ACCELPLANE_PROGRESS_EVENT_SECONDS however long it trained, are not read (issue 15).

Shown by the database's plan of the query itself, not by timing it: on SQLite the index
searched and the columns it is searched by, on PostgreSQL the pages the query read for a job
with a long history and for one with none."""

from __future__ import annotations

from typing import Any

from django.db import connection

from clusters.models import Cluster
from events.models import Event
from events.services import number_events
from tests.plans import pages, plan_of, statements_of
from tests.support import NAMESPACE, at, job
from workloads import admission, live, services
from workloads.models import Workload

HISTORY = 5000
NOW = at(minutes=10)  # every progress event so far is older than the window


def test_a_jobs_old_progress_events_are_not_read_to_find_its_recent_ones(gpu_queues, settings):
    settings.ACCELPLANE_PROGRESS_EVENT_SECONDS = 30
    for name in ("young", "old"):
        services.apply(
            gpu_queues,
            job(name, pods=1, startup="10s", step_time="5s"),
            source="w.yaml",
            now=at(),
            namespace=NAMESPACE,
        )
    admission.advance(gpu_queues, at(), at(seconds=20))
    rows = {
        row.owner.name: row
        for row in Workload.objects.select_related("owner", "cluster").filter(
            training_started_at__isnull=False
        )
    }
    add_progress_history(rows["old"], HISTORY)

    young, old = (plan(gpu_queues, rows[name]) for name in ("young", "old"))

    if connection.vendor == "sqlite":
        # Searched by every column the query narrows by: no scan of the job's events.
        search = "SEARCH events_event USING INDEX event_object_at_idx"
        by = "(cluster=? AND object_key=? AND kind=? AND at>?)"
        assert young == old == [f"{search} {by}"]
    else:
        assert pages(old) == pages(young)
        assert (old.get("Index Name"), old.get("Rows Removed by Filter")) == (
            "event_object_at_idx",
            None,  # the window is in the index's condition, not a filter of its rows
        )


def add_progress_history(row: Workload, count: int) -> None:
    """`count` older progress events of `row`, one per 30 s: as a job that trained that long
    leaves them."""
    Event.objects.bulk_create(
        Event(
            kind=live.PROGRESS,
            at=at(seconds=-30 * i),
            cluster=row.cluster.name,
            namespace=row.namespace,
            object_key=row.owner.key,
            workload_name=row.name,
            message="training at step 0; latest checkpoint step 0",
            data={"step": 0, "checkpoint_step": 0},
        )
        for i in range(1, count + 1)
    )
    number_events()  # as their commits would have
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE events_event")  # plans as a server's statistics choose them


def plan(cluster: Cluster, row: Workload) -> Any:
    """The plan of report_progress's query of `row`'s recent progress events, as run."""
    statements = statements_of(
        lambda: live.report_progress(cluster, [row], {row.pk: 0}, set(), NOW)
    )
    ((sql, params),) = [(s, p) for s, p in statements if '"events_event"."at" >' in s]
    return plan_of(sql, params)
