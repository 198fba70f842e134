"""Real Celery worker processes for integration tests, on the test's own database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def worker_database_url() -> str:
    """DATABASE_URL naming the database this test runs in (pytest-django's test_<NAME>)."""
    url = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail(f"{what} within {timeout:.0f} s")


class Workers:
    """Starts workers (`--pool=solo`) with extra environment; `stop` ends every one."""

    def __init__(self, logs: Path, env: Mapping[str, str]):
        self.logs = logs
        self.env = {
            **os.environ,
            "DATABASE_URL": worker_database_url(),
            "CELERY_TASK_ALWAYS_EAGER": "0",
            **env,
        }
        self.started: list[tuple[subprocess.Popen[bytes], IO[str]]] = []

    def __call__(self, **env: str) -> subprocess.Popen[bytes]:
        log = (self.logs / f"worker-{len(self.started)}.log").open("w")
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "controlplane",
                "worker",
                "--pool=solo",
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

    def stop(self) -> None:
        for worker, log in self.started:
            if worker.poll() is None:
                worker.terminate()
                try:
                    worker.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()
            log.close()
