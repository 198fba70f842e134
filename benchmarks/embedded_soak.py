"""`make run` under scripted clicking: does the embedded stack stay up?

Runs `make run`'s steps (migrate, demo, collectstatic, then `python -m controlplane.run`: web,
worker, watcher, beat) in a scratch directory on a spare port, then a user clicks through
the pages (logging in again now and then) while a team's script submits, scales, explains
and deletes workloads over the API. Prints the requests made, the errors (5xx, timeouts,
refused connections), the launcher's restarts of crashed processes and each process's RSS at
the start and the end; a progress line every minute.

    .venv/bin/python benchmarks/embedded_soak.py --minutes 30 --port 8141

tests/integration/test_embedded_stack.py runs the same stack and clicking for a few minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/embedded_soak.py` too

from benchmarks import processes  # noqa: E402

CLUSTER = "demo-gpu-cluster"
PAGES = ["/", "/queues/", "/workloads/", f"/clusters/{CLUSTER}/", "/platform/"]
JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: team-llm}}
spec:
  parallelism: 1
  completions: 1
  suspend: true
  template:
    spec:
      priorityClassName: training
      restartPolicy: Never
      containers:
      - name: trainer
        image: ghcr.io/example/finetune:1.0
        resources:
          requests: {{nvidia.com/gpu: "1"}}
          limits: {{nvidia.com/gpu: "1"}}
"""
# What make run's processes are told; nothing of a caller's full stack or keys leaks in.
DROPPED = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ACCELPLANE_ENCRYPTION_KEY")


class EmbeddedStack:
    """`make run` in `workdir` on `port`: its keys are generated into workdir/var."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir = workdir
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.log = workdir / "run.log"
        self.env = {k: v for k, v in os.environ.items() if k not in DROPPED} | {
            "DEBUG": "true",  # as the Makefile's run target sets it
            "ACCELPLANE_VAR_DIR": str(workdir / "var"),
            "ACCELPLANE_PORT": str(port),
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "PYTHONPATH": str(ROOT),
            "LOG_LEVEL": "WARNING",
        }
        self.launcher: subprocess.Popen[bytes] | None = None

    def prepare(self) -> None:
        for step in (["migrate", "--noinput", "-v", "0"], ["demo"], ["collectstatic", "--noinput"]):
            subprocess.run(
                [sys.executable, str(ROOT / "manage.py"), *step],
                cwd=self.workdir,  # the demo writes var/admin-password and var/llm-token here
                env=self.env,
                check=True,
                capture_output=True,
            )

    def start(self, timeout: float = 60) -> None:
        with self.log.open("ab") as log:
            self.launcher = subprocess.Popen(
                [sys.executable, "-m", "controlplane.run"],
                cwd=self.workdir,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # stop() can reach every process it started
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.answers():
                return
            time.sleep(0.5)
        raise RuntimeError(f"the web server did not answer within {timeout:.0f} s; see {self.log}")

    def answers(self) -> bool:
        try:
            return requests.get(f"{self.base}/login/", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def children(self) -> dict[str, int]:
        """The launcher's processes by name (web, worker, watcher, beat) -> pid."""
        assert self.launcher is not None
        found: dict[str, int] = {}
        for pid in processes.children(self.launcher.pid):
            if args := processes.command_line(pid):  # not exited since the listing
                found[processes.kind(args)] = pid
        return found

    def rss_kib(self) -> dict[str, int]:
        """The resident memory in KiB of the launcher's processes still running, by name."""
        return {name: kib for name, (_, kib) in processes.memory(self.children()).items()}

    def restarts(self) -> list[str]:
        """The launcher's log lines about restarting a process."""
        return [line for line in self.log.read_text().splitlines() if "restarting it" in line]

    def stop(self) -> int | None:
        """SIGTERM the launcher as Ctrl-C or `docker stop` would; its exit code."""
        if self.launcher is None:
            return None
        self.launcher.send_signal(signal.SIGTERM)
        try:
            code = self.launcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.launcher.pid, signal.SIGKILL)  # anything left behind
        return code

    def secret(self, name: str) -> str:
        return (self.workdir / "var" / name).read_text().strip()


@dataclass
class Tally:
    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    def record(self, what: str, response: Any, *expected: int) -> None:
        self.requests += 1
        if isinstance(response, Exception):
            self.errors[f"{what}: {type(response).__name__}"] += 1
        elif response.status_code not in expected:
            self.errors[f"{what}: {response.status_code}"] += 1


class Clicker:
    """The admin clicking through the pages, and team llm's script on the API."""

    def __init__(self, stack: EmbeddedStack, tally: Tally) -> None:
        self.base = stack.base
        self.password = stack.secret("admin-password")
        self.api = requests.Session()
        self.api.headers["Authorization"] = f"Bearer {stack.secret('llm-token')}"
        self.browser = requests.Session()
        self.tally = tally
        self.round = 0

    def call(
        self, session: Any, what: str, method: str, path: str, *expected: int, **kw: Any
    ) -> Any:
        """The response, or None when the request failed (counted as an error)."""
        try:
            response = session.request(method, self.base + path, timeout=15, **kw)
        except requests.RequestException as error:
            self.tally.record(what, error)
            return None
        self.tally.record(what, response, *expected)
        return response

    def log_in(self) -> None:
        self.browser = requests.Session()
        self.call(self.browser, "login page", "GET", "/login/", 200)
        self.call(
            self.browser,
            "log in",
            "POST",
            "/login/",
            302,
            data={
                "username": "admin",
                "password": self.password,
                "csrfmiddlewaretoken": self.browser.cookies.get("csrftoken", ""),
            },
            allow_redirects=False,
        )

    def click_round(self) -> None:
        """One round: a few pages, a submission, a scale, an explain, a deletion."""
        if self.round % 20 == 0:
            self.log_in()
        for page in PAGES:
            self.call(self.browser, page, "GET", page, 200)
        name = f"soak-{self.round % 3}"
        yaml = {"data": JOB.format(name=name), "headers": {"Content-Type": "application/yaml"}}
        submitted = self.call(
            self.api, "submit", "POST", "/api/v1/workloads?namespace=llm", 200, 201, **yaml
        )
        self.call(self.api, "whatif", "POST", "/api/v1/whatif?namespace=llm", 200, **yaml)
        self.scale_inference(replicas=1 + self.round % 3)
        if submitted is not None and submitted.status_code in (200, 201):
            pk = submitted.json()["objects"][0]["id"]
            self.call(self.api, "explain", "GET", f"/api/v1/workloads/{pk}/explain", 200)
            self.call(self.browser, "workload page", "GET", f"/workloads/{pk}/", 200)
            if self.round % 3 == 2:
                self.call(self.api, "delete", "DELETE", f"/api/v1/workloads/{pk}", 204)
        self.call(self.api, "events", "GET", "/api/v1/events?after=0&limit=50", 200)
        self.round += 1

    def scale_inference(self, replicas: int) -> None:
        listed = self.call(
            self.api,
            "list",
            "GET",
            "/api/v1/workloads?namespace=llm&kind=Deployment",
            200,
        )
        if listed is None or listed.status_code != 200 or not listed.json()["results"]:
            return
        pk = listed.json()["results"][0]["id"]
        self.call(
            self.api,
            "scale",
            "POST",
            f"/api/v1/workloads/{pk}/scale",
            200,
            json={"replicas": replicas},
        )


def click_for(stack: EmbeddedStack, seconds: float, tally: Tally, progress: bool = False) -> None:
    """Click rounds until `seconds` have passed, a short pause between rounds."""
    clicker = Clicker(stack, tally)
    start = time.monotonic()
    next_report = start + 60
    while time.monotonic() - start < seconds:
        clicker.click_round()
        time.sleep(0.2)
        if progress and time.monotonic() >= next_report:
            next_report += 60
            minutes = (time.monotonic() - start) / 60
            print(  # noqa: T201
                f"{minutes:5.1f} min: {tally.requests} requests, {sum(tally.errors.values())} "
                f"errors, {len(stack.restarts())} restarts, RSS KiB "
                f"{stack.rss_kib()}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--port", type=int, default=8141)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="accelplane-soak-"))
    stack = EmbeddedStack(workdir, args.port)
    stack.prepare()
    stack.start()
    try:
        before = stack.rss_kib()
        print(f"started; logs in {stack.log}; RSS KiB at start {before}", flush=True)  # noqa: T201
        tally = Tally()
        click_for(stack, args.minutes * 60, tally, progress=True)
        after = stack.rss_kib()
        answering = stack.answers()
    finally:
        code = stack.stop()
    print(f"minutes: {args.minutes:g}")  # noqa: T201
    print(f"requests: {tally.requests}")  # noqa: T201
    print(f"errors: {sum(tally.errors.values())} {dict(tally.errors)}")  # noqa: T201
    print(f"restarts: {len(stack.restarts())}")  # noqa: T201
    print(f"RSS KiB at start: {before}")  # noqa: T201
    print(f"RSS KiB at end:   {after}")  # noqa: T201
    print(f"answering at end: {answering}; launcher exit code on SIGTERM: {code}")  # noqa: T201


if __name__ == "__main__":
    main()
