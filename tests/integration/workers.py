"""Real Celery worker processes for integration tests, on the test's own database, and
threads standing in for a worker or a request."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit, urlunsplit

import pytest
from celery import current_app
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def worker_database_url() -> str:
    """DATABASE_URL naming the database this test runs in (pytest-django's test_<NAME>)."""
    url = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))


def wait_for(
    condition: Callable[[], object],
    timeout: float,
    what: str,
    evidence: Callable[[], str] | None = None,
) -> None:
    """Poll `condition` until it holds; fail naming `what`, with `evidence()` (the workers'
    logs, say) so that a failure in CI says why."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    detail = f"\n{evidence()}" if evidence else ""
    pytest.fail(f"{what} within {timeout:.0f} s{detail}")


def with_beat(condition: Callable[[], object], entry: str) -> Callable[[], object]:
    """`condition`, running beat's `entry` (of CELERY_BEAT_SCHEDULE) in this process on its
    schedule from now, as Celery beat would: its first run is one period after it starts."""
    scheduled = settings.CELERY_BEAT_SCHEDULE[entry]
    task, every = current_app.tasks[scheduled["task"]], float(scheduled["schedule"])
    last = time.monotonic()

    def check() -> object:
        nonlocal last
        if time.monotonic() - last >= every:
            last = time.monotonic()
            task()
        return condition()

    return check


class InThread(threading.Thread):
    """`work` in a thread of its own, with a database connection of its own."""

    def __init__(self, work: Callable[[], object]):
        super().__init__()
        self.work: Callable[[], object] = work
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            self.work()
        except Exception as error:  # reported by the test, not lost in the thread
            self.error = error
        finally:
            connection.close()


class Workers:
    """Starts workers (`--pool=solo` unless the options name a pool) with extra options and
    environment; `stop` ends every one."""

    def __init__(self, logs: Path, env: Mapping[str, str]):
        self.logs = logs
        self.env = {
            **os.environ,
            "DATABASE_URL": worker_database_url(),
            "CELERY_TASK_ALWAYS_EAGER": "0",
            **env,
        }
        self.started: list[tuple[subprocess.Popen[bytes], IO[str]]] = []

    def __call__(self, *options: str, **env: str) -> subprocess.Popen[bytes]:
        log = (self.logs / f"worker-{len(self.started)}.log").open("w")
        pool = [] if any(o.startswith("--pool") for o in options) else ["--pool=solo"]
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "controlplane",
                "worker",
                *pool,
                *options,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=INFO",
            ],
            cwd=ROOT,
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.started.append((worker, log))
        return worker

    def log_tails(self, lines: int = 30) -> str:
        """The last `lines` lines of each worker's log, for a failure message."""
        tails = []
        for number, (_, log) in enumerate(self.started):
            text = Path(log.name).read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- worker {number} ---\n" + "\n".join(text))
        return "\n".join(tails)

    def stop(self) -> None:
        for worker, log in self.started:
            stop(worker)
            log.close()


def race(target: Callable[[], object], threads: int) -> list[Exception]:
    """Run `target` in several threads released at the same instant, each on its own database
    connection (closed when it is done); return their exceptions."""
    start = threading.Barrier(threads)
    errors: list[Exception] = []

    def run() -> None:
        try:
            start.wait()
            target()
        except Exception as error:  # reported by the test, not lost in the thread
            errors.append(error)
        finally:
            connection.close()

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    return errors


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not stopped within 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
