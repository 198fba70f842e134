"""Simulated time scales with the running workloads, not with history (issue 15): the same
rounds of the simulated cluster, run once without and once with hundreds of finished Jobs (their
workloads, pods, checkpoints and events) in the cluster's history, run the same statements,
write the same events and, on SQLite, execute about as many virtual-machine instructions: a
step that reads every workload, pod or event the cluster ever had costs instructions per row.
Counted, not timed, so that a loaded machine cannot make it pass or fail."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from events.models import Event
from tests.support import NAMESPACE, at, copy_finished_job, job
from workloads import admission, live, runtime, services
from workloads.models import KubeObject, Workload

HISTORY = 500
"""Finished Jobs added to the history."""
INSTRUCTIONS_PER_TICK = 100
"""SQLite calls the progress handler once per this many virtual-machine instructions."""
GROWTH = 1.2
"""Deeper B-trees cost a few instructions more per lookup; reading the history's rows would
cost several times the rounds' work."""

SAVEPOINT = re.compile(r'"s\d+_x\d+"')
"""Savepoint names, numbered by the connection."""


@dataclass
class Work:
    """What the simulated cluster's rounds did: their statements (as sent, before their
    parameters), their SQLite instructions (in ticks) and the events they wrote."""

    statements: list[str] = field(default_factory=list)
    ticks: int = 0
    events: list[tuple[Any, ...]] = field(default_factory=list)


def test_a_rounds_work_does_not_grow_with_finished_jobs(gpu_queues, monkeypatch):
    finished = finish_a_job(gpu_queues)
    start_jobs(gpu_queues)
    rounds = [at(minutes=5, seconds=30 + 5 * i) for i in range(25)]

    with transaction.atomic():
        without = run_rounds(gpu_queues, rounds, monkeypatch)
        transaction.set_rollback(True)  # the same state again for the second run
    copy_finished_job(finished, range(HISTORY))
    assert Workload.objects.filter(phase=Workload.Phase.FINISHED).count() == HISTORY + 1
    with_history = run_rounds(gpu_queues, rounds, monkeypatch)

    # The rounds did a round's work: a job admitted, bound and started, training progress and
    # checkpoints, a job finishing.
    kinds = {kind for kind, *_ in without.events}
    assert {live.PODS, live.PROGRESS, "checkpoint.saved", "workload.finished"} <= kinds
    assert with_history.events == without.events
    assert with_history.statements == without.statements
    if connection.vendor == "sqlite":
        assert without.ticks > 0
        assert with_history.ticks <= without.ticks * GROWTH, (
            f"{with_history.ticks} instruction ticks with {HISTORY} finished jobs, "
            f"{without.ticks} without"
        )


def finish_a_job(cluster) -> KubeObject:
    """A Job that trained for a minute and finished, as history."""
    apply(cluster, job("done", pods=1, startup="10s", step_time="5s", total_steps=12), at())
    admission.advance(cluster, at(), at(minutes=2))
    owner = KubeObject.objects.get(name="done")
    assert owner.workloads.get().phase == Workload.Phase.FINISHED
    assert owner.checkpoints.exists()
    return owner


def start_jobs(cluster) -> None:
    """One Job training for good, one that finishes in the measured rounds, and one that
    waits to be admitted when they begin."""
    start = at(minutes=5)
    apply(cluster, job("long", pods=1, startup="10s", step_time="5s"), start)
    apply(cluster, job("short", pods=1, startup="10s", step_time="5s", total_steps=20), start)
    admission.advance(cluster, start, start + timedelta(seconds=20))
    late = job("late", pods=1, startup="10s", step_time="5s")
    apply(cluster, late, start + timedelta(seconds=25), admit=services.Admit.SKIP)


def apply(cluster, text: str, now: datetime, **options: Any) -> None:
    services.apply(cluster, text, source="w.yaml", now=now, namespace=NAMESPACE, **options)


def run_rounds(cluster, instants: list[datetime], monkeypatch) -> Work:
    """`admission.settle` at each instant; what its simulated rounds did."""
    work = Work()
    simulate_round = runtime.simulate_round

    def counted(*args: Any, **kwargs: Any) -> bool:
        with statements(work.statements), instruction_ticks(work):
            return simulate_round(*args, **kwargs)

    monkeypatch.setattr(runtime, "simulate_round", counted)
    last = Event.objects.order_by("-id").values_list("id", flat=True).first()
    for now in instants:
        admission.settle(cluster, now)
    monkeypatch.setattr(runtime, "simulate_round", simulate_round)
    written = Event.objects.filter(id__gt=last).order_by("id")
    work.events = list(written.values_list("kind", "at", "object_key", "workload_name", "data"))
    return work


@contextmanager
def statements(sent: list[str]) -> Iterator[None]:
    def execute(run: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(SAVEPOINT.sub("savepoint", sql))
        return run(sql, params, many, context)

    with connection.execute_wrapper(execute):
        yield


@contextmanager
def instruction_ticks(work: Work) -> Iterator[None]:
    if connection.vendor != "sqlite":
        yield
        return

    def tick() -> int:
        work.ticks += 1
        return 0  # carry on

    connection.ensure_connection()
    database = connection.connection
    database.set_progress_handler(tick, INSTRUCTIONS_PER_TICK)
    try:
        yield
    finally:
        database.set_progress_handler(None, INSTRUCTIONS_PER_TICK)


@pytest.fixture(autouse=True)
def _progress_window(settings):
    settings.ACCELPLANE_PROGRESS_EVENT_SECONDS = 30
