"""Private servers for fault tests: a Redis, a PostgreSQL and a web server of our own, on
free ports, that a test may stop and start again without disturbing anyone else's."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from controlplane import run
from tests.integration.workers import ROOT, stop


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    pytest.fail(f"{what} did not listen on port {port} within {timeout:.0f} s")


def binary(name: str, *candidates: str) -> str:
    for path in (shutil.which(name), *candidates):
        if path and os.access(path, os.X_OK):
            return path
    pytest.skip(f"{name} is not installed on this machine")


class PrivateRedis:
    """redis-server without persistence: a restart loses every key, as a crash would."""

    def __init__(self, workdir: Path):
        self.server = binary("redis-server")
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
        )
        wait_for_port(self.port, 10, "redis-server")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class PrivatePostgres:
    """A PostgreSQL cluster in a temporary directory, run as the postgres user, trust auth.

    The directory is outside pytest's (private to root), where the postgres user can reach it.
    """

    def __init__(self) -> None:
        bindir = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"))), None)
        if bindir is None or not (bindir / "initdb").exists():
            pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.bindir = bindir
        self.port = free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="accelplane-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.workdir, "postgres", "postgres")
        self.data = self.workdir / "data"

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        # initdb and postgres refuse to run as root: the cluster belongs to `postgres`.
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, cwd="/")

    def init(self) -> None:
        self.workdir.chmod(0o777)
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "start",
            "-l",
            str(self.workdir / "postgres.log"),
        )

    def createdb(self, name: str) -> None:
        self._run(str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), name)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextmanager
def web_server(
    env: Mapping[str, str], log: Path, server: str = run.DEFAULT_WEB_SERVER
) -> Iterator[int]:
    """`server` serving Accelplane on a free port with `env`, started as `make run` starts it
    (daphne, or uvicorn) or as `make stack` starts its HTTP servers (run.HTTP_SERVER); stopped on
    exit."""
    port = free_port()
    if server == run.HTTP_SERVER:
        command = run.http_command(str(port))
    else:
        command = run.web_command(server, str(port))
    with log.open("w") as output:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, "DEBUG": "true", **env},
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, 30, server)
            yield port
        finally:
            stop(process)
