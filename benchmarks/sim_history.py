"""The simulated cluster's round against history: its cost must follow the running workloads.

A cluster runs R training Jobs (one 2-GPU pod each, a step every 5 s, a checkpoint every 10
steps); K rounds (`runtime.simulate_round`, under the admission lock as `admission.settle` runs
it) then advance its clock 5 s each: training progresses, checkpoints are saved, progress
events are written. This is timed once with no history and once with H finished Jobs in the
cluster's history: their workloads, pods, checkpoints and events, as a Job that trained for ten
minutes leaves them (copied from one that did, so that building them costs little). The
figures should be the same (issue 15: simulated time scales with running workloads, not with
history). Beside the times, the database's work, counted: SQLite's virtual-machine
instructions, or the buffer pages PostgreSQL's plans touched (cached or not; they also depend
on the plans its statistics choose).

    python benchmarks/sim_history.py [--running 20] [--history 0 10000] [--rounds 200]
        [--database-url postgres://...] [--database-name NAME]

SQLite (a new file) unless `--database-url` names a PostgreSQL server: the benchmark then
creates a database of its own there (`--database-name`, by default `accelplane_bench_<pid>`)
and drops it at the end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

_parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_parser.add_argument("--running", type=int, default=20, help="R: running training Jobs")
_parser.add_argument(
    "--history", type=int, nargs="+", default=[0, 10_000], help="H: finished Jobs, per run"
)
_parser.add_argument("--rounds", type=int, default=200, help="K: rounds timed per run")
_parser.add_argument("--database-url", default="", help="a PostgreSQL server (default: SQLite)")
_parser.add_argument("--database-name", default="", help="PostgreSQL: the scratch database")
ARGS = _parser.parse_args()

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.scratch import scratch_dir  # noqa: E402

os.environ.setdefault("ACCELPLANE_VAR_DIR", scratch_dir())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.pop("DATABASE_URL", None)
if ARGS.database_url:
    os.environ["DATABASE_URL"] = ARGS.database_url
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))  # one machine's, throwaway

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from clusters import services as cluster_services  # noqa: E402
from clusters.models import Cluster  # noqa: E402
from tests.support import GPU_QUEUES, T0, copy_finished_job, job  # noqa: E402
from workloads import admission, services  # noqa: E402
from workloads.models import KubeObject, Workload  # noqa: E402

STEP = timedelta(seconds=5)
TARGET_GROWTH = 1.10  # a round with history at most 10 % slower than without (noise)
WORK = {"sqlite": "k SQLite instructions", "postgresql": "pages read"}
WARM_UP = 20  # rounds before the timed ones


def main() -> None:
    if connection.vendor == "postgresql":
        # A database of its own, as the test runner makes one (migrated), dropped at the end.
        name = ARGS.database_name or f"accelplane_bench_{os.getpid()}"
        connection.settings_dict["TEST"]["NAME"] = name
        created = connection.creation.create_test_db(verbosity=0, autoclobber=True)
        try:
            run()
        finally:
            connection.creation.destroy_test_db(created, verbosity=0)
    else:
        call_command("migrate", verbosity=0)
        run()


def run() -> None:
    figures = {}
    for history in ARGS.history:
        figures[history] = measure(ARGS.running, history, ARGS.rounds)
    base = figures[ARGS.history[0]]
    for history, f in figures.items():
        print(  # noqa: T201
            f"sim round ({connection.vendor}): {ARGS.running} running, {history} finished: "
            f"{f.ms:.2f} ms/round ({f.cpu_ms:.2f} ms CPU), {f.queries:.1f} queries/round, "
            f"{f.work:.1f} {WORK[connection.vendor]}/round"
            f"  (x{f.ms / base.ms:.2f} of {ARGS.history[0]} finished; target < x{TARGET_GROWTH})"
        )


@dataclass(frozen=True)
class Figures:
    ms: float
    """Wall-clock milliseconds per round."""
    cpu_ms: float
    """This process's CPU milliseconds per round: less disturbed by a busy machine (SQLite
    runs in it; PostgreSQL does not)."""
    queries: float
    work: float
    """SQLite: thousands of virtual-machine instructions; PostgreSQL: buffer pages read."""


def measure(running: int, history: int, rounds: int) -> Figures:
    """A round's cost in a new cluster with `running` training Jobs and `history` finished
    ones."""
    cluster = Cluster.objects.create(name=f"sim-{history}", status=Cluster.Status.RUNNING)
    cluster_services.provision_now(
        cluster, name="gpupool", machine_type="g2-standard-24", node_count=running + 1, at=T0
    )
    quota = GPU_QUEUES.replace("nominalQuota: 6", f"nominalQuota: {2 * (running + 1)}")
    services.apply(cluster, quota.replace("nominalQuota: 72", "nominalQuota: 1000"), **_at(T0))
    now = add_history(cluster, history, T0)
    for i in range(running):
        training_job = job(f"train-{i}", pods=1, startup="10s", step_time="5s")
        services.apply(cluster, training_job, **_at(now))
    admission.advance(cluster, now, now + timedelta(seconds=10))  # bound, ready, training
    training = Workload.objects.filter(
        cluster=cluster, phase=Workload.Phase.ADMITTED, training_started_at__isnull=False
    )
    assert training.count() == running, "every running Job trains"
    now += timedelta(seconds=10)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            # The tables just filled as autovacuum leaves them: with the statistics of empty
            # tables the rounds would run plans no server runs, and autovacuum catching up
            # meanwhile would be counted and timed with them.
            cursor.execute("VACUUM ANALYZE")
    for _ in range(WARM_UP):  # connections, caches and compiled queries ready
        now += STEP
        admission._simulate_round(cluster, now, first=True)
    queries = 0

    def counted(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal queries
        queries += 1
        return execute(sql, params, many, context)

    started, cpu = time.perf_counter(), time.process_time()
    with connection.execute_wrapper(counted), database_work() as work:
        for _ in range(rounds):
            now += STEP
            admission._simulate_round(cluster, now, first=True)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    per_round = [seconds * 1000, cpu * 1000, queries, work[0]]
    return Figures(*(figure / rounds for figure in per_round))


@contextmanager
def database_work() -> Iterator[list[float]]:
    """The database's work inside, counted rather than timed (a busy machine changes times,
    not counts): SQLite's virtual-machine instructions, in thousands, or the PostgreSQL
    buffer pages the database read (from its cache or not)."""
    work = [0.0]
    if connection.vendor == "sqlite":
        connection.ensure_connection()

        def tick() -> int:
            work[0] += 1
            return 0  # carry on

        connection.connection.set_progress_handler(tick, 1000)
        try:
            yield work
        finally:
            connection.connection.set_progress_handler(None, 1000)
        return
    before = _pages_read()
    yield work
    work[0] = _pages_read() - before


def _pages_read() -> float:
    with connection.cursor() as cursor:
        # This backend's counts are flushed to the shared ones at most once a second.
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()"
        )
        (pages,) = cursor.fetchone()
    return float(pages)


def _at(now: datetime) -> dict[str, Any]:
    return {"source": "bench.yaml", "now": now, "namespace": "llm"}


def add_history(cluster: Cluster, count: int, now: datetime) -> datetime:
    """`count` finished Jobs, each as one that trained for ten minutes leaves it: copies of one
    that did. Returns the instant its history ends."""
    services.apply(
        cluster,
        job("done", pods=1, startup="10s", step_time="5s", total_steps=120),
        **_at(now),
    )
    end = now + timedelta(minutes=15)
    admission.advance(cluster, now, end)
    owner = KubeObject.objects.get(cluster=cluster, name="done")
    workload = owner.workloads.get()
    assert workload.phase == Workload.Phase.FINISHED
    copy_rows(owner, count)
    return end


def copy_rows(owner: KubeObject, count: int) -> None:
    """`count` copies of a finished Job, a thousand a transaction."""
    batch = 1000
    for start in range(0, count, batch):
        with transaction.atomic():
            copy_finished_job(owner, range(start, min(count, start + batch)))


if __name__ == "__main__":
    main()
