"""Workload submissions per second over the REST API, with N concurrent clients (targets:
at least 300/s, p99 under 100 ms on this 2-core machine), against the full stack.

Starts `make stack`'s processes (two HTTP servers, two sockets servers, two workers, beat) on
a fresh PostgreSQL database and Redis database, gives every client its own team token, and has
each client POST Jobs (YAML) in a loop, alternating between the two HTTP servers. Prints throughput,
latency percentiles and errors, then checks that no ClusterQueue admitted past its quota.

    python benchmarks/api_load.py [--clients 16] [--requests 100]

Kueue has no submission API of its own: beside the target it prints the nearest figures,
the rate its manager may call the apiserver at (client QPS 300, burst 500) and its perf suite's
admissions a second on envtest (~43/s; research/kueue-perf.md).

Soak mode (`--minutes M`): the clients submit until M minutes are up, at `--rate` submissions
a second in all if given, and each deletes its older jobs so that at most `--keep` of them
exist at once: the database and the admission queue stay bounded, so memory that grows is a
leak, not data. Every minute it prints the resident memory (RSS) of each of the stack's
processes, and at the end each one's growth since the first minute's warm-up.

    python benchmarks/api_load.py --clients 4 --minutes 30 [--rate 50] [--keep 20]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psycopg
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/api_load.py` too

from benchmarks import processes  # noqa: E402
from benchmarks.machine import python_speed  # noqa: E402
from benchmarks.scratch import scratch_dir  # noqa: E402

DATABASE = "accelplane_bench"
PG = "postgres://postgres@127.0.0.1:5432"
REDIS_URL = "redis://127.0.0.1:6379/5"
PORT = 8200
Plan = TypeVar("Plan")  # what a client is told to do: a number of requests, a Soak

SETUP = """
from django.utils import timezone
from clusters import services as cs
from clusters.models import Cluster
from teams import services as ts
from workloads import services
cluster = Cluster.objects.create(name="bench", status=Cluster.Status.RUNNING)
# Eight nodes: 880 pod slots (110 a node) for the 800 pods the quota admits.
cs.provision_now(cluster, name="cpu", machine_type="n2-standard-128", node_count=8)
services.apply(cluster, '''
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: shared}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 400}, {name: memory, nominalQuota: 1600Gi}]
''', source="queues.yaml", now=timezone.now())
for i in range(CLIENTS):
    ns = f"team-{i}"
    services.apply(cluster, f'''
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: lq, namespace: {ns}}}
spec: {{clusterQueue: shared}}
''', source="lq.yaml", now=timezone.now())
    ts.ensure_team(ns, namespaces=[ns], members=[(f"user-{i}", "submitter")])
    from django.contrib.auth.models import User
    print("TOKEN", ts.issue_token(User.objects.get(username=f"user-{i}"))[1])
"""


def job(client: int, index: int) -> bytes:
    return f"""\
apiVersion: batch/v1
kind: Job
metadata:
  name: job-{client}-{index}
  labels: {{kueue.x-k8s.io/queue-name: lq}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: busybox
        resources: {{requests: {{cpu: 500m, memory: 1Gi}}}}
""".encode()


def fresh_stores() -> None:
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    redis.Redis.from_url(REDIS_URL).flushdb()


def wait_until_serving(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/api/schema/")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the web server on port {port} did not start")


def post_job(
    conn: http.client.HTTPConnection, number: int, index: int, headers: dict[str, str]
) -> tuple[int, bytes, float]:
    """Submit client `number`'s job `index`: the status, the body and the seconds it took."""
    started = time.perf_counter()
    conn.request("POST", f"/api/v1/workloads?namespace=team-{number}", job(number, index), headers)
    response = conn.getresponse()
    body = response.read()
    return response.status, body, time.perf_counter() - started


def connections() -> list[http.client.HTTPConnection]:
    return [http.client.HTTPConnection("127.0.0.1", PORT + i, timeout=30) for i in (0, 1)]


def client(
    number: int, token: str, requests: int, latencies: list[float], errors: list[str]
) -> None:
    servers = connections()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    for index in range(requests):
        status, _, seconds = post_job(servers[index % 2], number, index, headers)
        latencies.append(seconds)
        if status != 201:
            errors.append(str(status))


class Pacer:
    """Hands out submission times 1/rate apart to all the clients: the total rate holds
    whatever the number of clients."""

    def __init__(self, rate: float) -> None:
        self.interval = 1 / rate
        self.next_slot = time.monotonic()
        self.lock = threading.Lock()

    def wait(self) -> None:
        with self.lock:
            # Slots missed while every client was busy are not made up in a burst later.
            slot = max(self.next_slot, time.monotonic())
            self.next_slot = slot + self.interval
        time.sleep(max(0.0, slot - time.monotonic()))


@dataclass(frozen=True)
class Soak:
    deadline: float  # time.monotonic()
    keep: int  # each client's jobs that may exist at once
    pacer: Pacer | None


def soak_client(
    number: int, token: str, soak: Soak, latencies: list[float], errors: list[str]
) -> None:
    """Submit until the deadline, deleting this client's oldest jobs to keep soak.keep.
    A dropped connection is counted as an error and the soak goes on: it runs for long."""
    servers = connections()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    kept: deque[int] = deque()
    index = 0
    while time.monotonic() < soak.deadline:
        if soak.pacer is not None:
            soak.pacer.wait()
        conn = servers[index % 2]
        index += 1
        try:
            # Deleted before the next one is submitted: never more than soak.keep at once.
            while len(kept) >= soak.keep:
                delete_job(conn, kept.popleft(), headers, errors)
            status, body, seconds = post_job(conn, number, index, headers)
            latencies.append(seconds)
            if status != 201:
                errors.append(str(status))
                continue
            kept.append(json.loads(body)["objects"][0]["id"])
        except (OSError, http.client.HTTPException) as error:
            conn.close()  # the next request opens it again
            errors.append(type(error).__name__)


def delete_job(
    conn: http.client.HTTPConnection, pk: int, headers: dict[str, str], errors: list[str]
) -> None:
    conn.request("DELETE", f"/api/v1/workloads/{pk}", headers=headers)
    response = conn.getresponse()
    response.read()
    if response.status != 204:
        errors.append(f"DELETE {response.status}")


# Resident memory of the stack's processes (benchmarks/processes.py reads /proc).
Sample = dict[str, tuple[int, int]]  # process name: (pid, VmRSS in KiB)
ROLE_ORDER = ("web-0", "web-1", "sockets-0", "sockets-1", "worker-0", "worker-1", "watcher", "beat")


def sample_memory(root: int) -> Sample:
    return processes.memory(processes.stack_processes(root, PORT))


def in_order(names: set[str]) -> list[str]:
    """The stack's roles in run.py's order, each followed by its children; others last."""

    def key(name: str) -> tuple[int, str]:
        base = name.split(".")[0]
        return (ROLE_ORDER.index(base) if base in ROLE_ORDER else len(ROLE_ORDER), name)

    return sorted(names, key=key)


class Progress:
    """Prints a line per memory sample: the submissions so far, their rate since the last
    line, the errors so far and each process's RSS."""

    def __init__(self, latencies: list[float], errors: list[str]) -> None:
        self.latencies = latencies
        self.errors = errors
        self.count = 0
        self.at = time.monotonic()

    def report(self, label: str, sample: Sample) -> None:
        count, at = len(self.latencies), time.monotonic()
        per_second = (count - self.count) / (at - self.at)
        self.count, self.at = count, at
        rss = ", ".join(f"{name} {sample[name][1] / 1024:.1f}" for name in in_order(set(sample)))
        print(
            f"{label}: {count} submissions, {per_second:.1f}/s, errors {len(self.errors)}; "
            f"RSS MB: {rss}",
            flush=True,
        )


def memory_summary(start: Sample, end: Sample, start_label: str) -> None:
    for name in in_order(set(start) | set(end)):
        if name not in start or name not in end:
            print(f"memory {name}: not running at both {start_label} and the end")
            continue
        (first_pid, first), (last_pid, last) = start[name], end[name]
        restarted = " (restarted since: not comparable)" if first_pid != last_pid else ""
        print(
            f"memory {name}: {first / 1024:.1f} MB at {start_label}, {last / 1024:.1f} MB at "
            f"the end: {(last - first) / 1024:+.1f} MB ({(last - first) / first:+.1%}){restarted}"
        )


def run_clients(
    target: Callable[[int, str, Plan, list[float], list[str]], None],
    tokens: list[str],
    plan: Plan,
    latencies: list[float],
    errors: list[str],
) -> list[threading.Thread]:
    threads = [
        threading.Thread(target=target, args=(i, token, plan, latencies, errors))
        for i, token in enumerate(tokens)
    ]
    for thread in threads:
        thread.start()
    return threads


def soak(
    args: argparse.Namespace,
    tokens: list[str],
    stack_pid: int,
    latencies: list[float],
    errors: list[str],
) -> None:
    """Run the clients for args.minutes, printing the stack's memory every minute."""
    started = time.monotonic()
    plan = Soak(started + args.minutes * 60, args.keep, Pacer(args.rate) if args.rate else None)
    progress = Progress(latencies, errors)
    samples = [sample_memory(stack_pid)]
    progress.report("minute 0", samples[0])
    threads = run_clients(soak_client, tokens, plan, latencies, errors)
    for minute in range(1, args.minutes):
        time.sleep(max(0.0, started + minute * 60 - time.monotonic()))
        samples.append(sample_memory(stack_pid))
        progress.report(f"minute {minute}", samples[-1])
    for thread in threads:
        thread.join()
    samples.append(sample_memory(stack_pid))
    progress.report(f"minute {args.minutes} (end)", samples[-1])
    # The first minute warms up (imports, connections, caches): growth counts from its end.
    if len(samples) > 2:
        memory_summary(samples[1], samples[-1], "minute 1")
    else:
        memory_summary(samples[0], samples[-1], "the start")
    print(f"target: every process flat after minute 1; {KUEUE_MEMORY}")


KUEUE_FIGURES = (
    "Kueue: no submission API (Jobs go to the apiserver); its manager calls the apiserver at "
    "most 300/s (client QPS 300, burst 500); its perf suite admitted 15,000 in 351 s on "
    "envtest (~43/s)"
)
# Kueue's manager, for the soak's memory: requests and limit in its default manifest.
KUEUE_MEMORY = "Kueue's manager: 512 Mi requested and its limit (config/components/manager)"


# events.services.EVENTS_LOCK as pg_locks shows a one-bigint advisory lock: its low 32 bits.
EVENTS_LOCK_OBJID = 0x4556_4E54
LOCK_WAITERS = """
SELECT count(*) FILTER (WHERE objid = %s), count(*)
FROM pg_locks WHERE NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = %s)
"""


class LockSampler(threading.Thread):
    """How often a transaction waits for the event log's lock (issue 15 item 3 asks whether
    it is a bottleneck), and for any lock at all: pg_locks every 10 ms while clients run."""

    def __init__(self) -> None:
        super().__init__(name="lock-sampler", daemon=True)
        self.running = threading.Event()
        self.running.set()
        self.samples = self.event_lock = self.any_lock = 0

    def run(self) -> None:
        with psycopg.connect(f"{PG}/{DATABASE}", autocommit=True) as conn:
            while self.running.is_set():
                row = conn.execute(LOCK_WAITERS, [EVENTS_LOCK_OBJID, DATABASE]).fetchone()
                event_lock, any_lock = row if row else (0, 0)
                self.samples += 1
                self.event_lock += event_lock > 0
                self.any_lock += any_lock > 0
                time.sleep(0.01)

    def stop(self) -> str:
        self.running.clear()
        self.join()
        share = 100 / max(1, self.samples)
        return (
            f"lock waits: a writer waited for the event log's lock in "
            f"{self.event_lock * share:.1f}% of {self.samples} samples, for any lock in "
            f"{self.any_lock * share:.1f}%"
        )


class CpuMeter:
    """The CPU time each part of the stack spends while the clients run, from /proc: the web
    servers, the workers (admission and the simulated cluster), PostgreSQL's processes and
    Redis's (both the whole server's: keep the machine otherwise quiet). A process that exits
    meanwhile takes its time with it."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.start = self.sample()

    def groups(self) -> dict[str, list[int]]:
        stack = processes.stack_processes(self.root, PORT)
        return {
            "web": [pid for name, pid in stack.items() if name.startswith("web-")],
            "sockets": [pid for name, pid in stack.items() if name.startswith("sockets-")],
            "workers": [pid for name, pid in stack.items() if name.startswith("worker-")],
            "PostgreSQL": processes.by_command_name("postgres"),
            "Redis": processes.by_command_name("redis-server"),
        }

    def sample(self) -> dict[str, dict[int, float]]:
        return {
            group: {pid: processes.cpu_seconds(pid) for pid in pids}
            for group, pids in self.groups().items()
        }

    def report(self, submissions: int, seconds: float, clients: float) -> str:
        """The stack's CPU per submission, and the machine's share of it; `clients`, the CPU
        seconds of this benchmark's own clients, which take the same cores."""
        end = self.sample()
        used = {
            group: sum(t - self.start[group].get(pid, 0.0) for pid, t in times.items())
            for group, times in end.items()
        }
        total = sum(used.values())
        parts = ", ".join(f"{g} {1000 * t / submissions:.1f}" for g, t in used.items())
        cores = os.cpu_count() or 1
        return (
            f"CPU per submission (ms): {parts}; total {1000 * total / submissions:.1f}: "
            f"{cores} cores {100 * (total + clients) / (cores * seconds):.0f}% busy (the "
            f"clients {1000 * clients / submissions:.1f} ms of it), at most "
            f"~{submissions * cores / total:.0f}/s at this cost"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    # 1,600 submissions by default: a run of 640 was over in under 4 s, its figure as much the
    # servers' warm-up (connections, statements prepared on each) as their steady state.
    parser.add_argument("--requests", type=int, default=100, help="per client")
    parser.add_argument("--minutes", type=int, help="soak: submit for this long instead")
    parser.add_argument("--rate", type=float, help="soak: submissions a second in all")
    parser.add_argument("--keep", type=int, default=20, help="soak: jobs a client keeps")
    args = parser.parse_args()
    fresh_stores()
    env = {
        **os.environ,
        "DATABASE_URL": f"{PG}/{DATABASE}",
        "REDIS_URL": REDIS_URL,
        "ACCELPLANE_VAR_DIR": scratch_dir(),
        "ACCELPLANE_PORT": str(PORT),
        "ACCELPLANE_API_RATE": "1000000/min",
        # Production settings (DEBUG off) over plain HTTP on this machine, a key for this run.
        "SECRET_KEY": secrets.token_urlsafe(50),
        "SECURE_SSL_REDIRECT": "false",
        "LOG_LEVEL": os.environ.get("LOG_LEVEL", "ERROR"),
    }
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    setup = f"CLIENTS = {args.clients}\n" + SETUP
    output = subprocess.run(
        [python, "manage.py", "shell", "-c", setup],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    tokens = [line.split()[1] for line in output.splitlines() if line.startswith("TOKEN ")]
    stack = subprocess.Popen(
        [python, "-m", "controlplane.run", "--stack"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL
    )
    try:
        for port in (PORT, PORT + 1):
            wait_until_serving(port)
        latencies: list[float] = []
        errors: list[str] = []
        sampler = LockSampler()
        sampler.start()
        cpu = CpuMeter(stack.pid)
        started, clients_cpu = time.perf_counter(), time.process_time()
        if args.minutes is None:
            for thread in run_clients(client, tokens, args.requests, latencies, errors):
                thread.join()
        else:
            soak(args, tokens, stack.pid, latencies, errors)
        seconds = time.perf_counter() - started
        clients_cpu = time.process_time() - clients_cpu
        cpu_used = cpu.report(max(1, len(latencies)), seconds, clients_cpu)
        lock_waits = sampler.stop()
    finally:
        stack.terminate()
        stack.wait(timeout=30)
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    p50 = statistics.median(ordered)
    print(  # noqa: T201
        f"api load: {len(latencies)} submissions by {args.clients} clients in {seconds:.1f} s: "
        f"{len(latencies) / seconds:.0f}/s (target >= 300), p50 {p50 * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms (target < 100), errors {len(errors)} {sorted(set(errors))}"
    )
    print(KUEUE_FIGURES)  # noqa: T201
    check = subprocess.run(
        [python, "manage.py", "shell", "-c", QUOTA_CHECK],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    print(cpu_used)  # noqa: T201
    print(lock_waits)  # noqa: T201
    print(check.stdout.strip() or check.stderr.strip())  # noqa: T201
    print(python_speed())  # noqa: T201


QUOTA_CHECK = """
from workloads.models import Workload
held = sum(
    p["requests"].get("cpu", 0) * p["count"]
    for w in Workload.objects.filter(phase__in=Workload.HOLDING_QUOTA)
    for p in w.pod_sets
)
print(f"quota check: {held / 1000:g} of 400 cpu held, over-committed: {held > 400_000}")
"""


if __name__ == "__main__":
    main()
