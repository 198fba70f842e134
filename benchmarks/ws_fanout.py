"""Commit-to-browser latency of admission events fanned out to 200 WebSocket clients (target:
p99 under 100 ms, issue 15).

Starts the two sockets servers of `make stack` on a fresh PostgreSQL database and Redis
database, connects the clients (an admin's browser session each, spread over both servers) in a
separate process, then admits workloads one at a time through the admission service. Each
admission's commit is timestamped by an on-commit hook that runs before the events are
published; each client timestamps every event as it arrives. Latency = arrival - commit, on
one machine's clock. Prints percentiles and whether every client got every event exactly
once, in order.

    python benchmarks/ws_fanout.py [--clients 200] [--admissions 100] [--interval 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import python_speed  # noqa: E402
from benchmarks.scratch import scratch_dir  # noqa: E402

DATABASE = "accelplane_bench_ws"
PG = "postgres://postgres@127.0.0.1:5432"
REDIS_URL = "redis://127.0.0.1:6379/7"
PORT = 8300
SOCKET_PORTS = (PORT + 2, PORT + 3)  # make stack's, after its two HTTP servers (run.commands)

ENV = {
    "DATABASE_URL": f"{PG}/{DATABASE}",
    "REDIS_URL": REDIS_URL,
    "ACCELPLANE_VAR_DIR": scratch_dir(),
    "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    "ACCELPLANE_PORT": str(PORT),
    "LOG_LEVEL": os.environ.get("LOG_LEVEL", "ERROR"),
    # Production settings (DEBUG off) over plain HTTP on this machine; the sessions this process
    # signs must be the servers' too: one key for the run (inherited by the browser processes).
    "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
    "SECURE_SSL_REDIRECT": "false",
}
os.environ.update(ENV)

QUEUES = """
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
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 100000}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: bench}
spec: {clusterQueue: shared}
"""


def job(index: int) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: job-{index}, namespace: bench, labels: {{kueue.x-k8s.io/queue-name: lq}}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: busybox, resources: {{requests: {{cpu: 100m}}}}}}]
"""


def fresh_stores() -> None:
    import psycopg
    import redis

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    redis.Redis.from_url(REDIS_URL).flushdb()


def start_sockets_servers() -> list[subprocess.Popen[bytes]]:
    """`make stack`'s two sockets servers, with the ASGI server ACCELPLANE_WEB_SERVER names."""
    from controlplane.run import commands, web_server

    stack = commands(2, 0, web_server(), sockets=2)
    sockets = [cmd for name, cmd in stack.items() if name.startswith("sockets-")]
    # Their access logs (a line per socket) go nowhere; errors still reach stderr.
    servers = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL) for cmd in sockets]
    try:
        for port in SOCKET_PORTS:
            _wait_for(port)
    except BaseException:
        for server in servers:
            server.terminate()
        raise
    return servers


def _wait_for(port: int, timeout: float = 60) -> None:
    """Until the port takes connections: on a busy machine a server takes seconds to start."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"no web server on port {port} after {timeout:.0f} s") from None
            time.sleep(0.1)


Arrivals = list[tuple[int, float]]
"""(seq, receive time) of each event one client received."""


# -- the browsers, in a process of their own so the driver's work never delays a receive --


async def browser(port: int, cookie: str, ready: asyncio.Event, arrivals: Arrivals) -> None:
    import aiohttp

    headers = {"Origin": f"http://127.0.0.1:{port}", "Cookie": f"sessionid={cookie}"}
    url = f"http://127.0.0.1:{port}/ws/events/?after=0"
    async with aiohttp.ClientSession() as http, http.ws_connect(url, headers=headers) as socket:
        async for message in socket:
            received = time.time()
            body = json.loads(message.data)
            if body["type"] == "caught_up":
                ready.set()
            elif body["type"] == "event":
                arrivals.append((body["event"]["seq"], received))


def browsers(clients: int, cookie: str, connected, done, results) -> None:
    async def run() -> None:
        arrivals: list[Arrivals] = [[] for _ in range(clients)]
        readies = [asyncio.Event() for _ in range(clients)]
        tasks = [
            asyncio.create_task(browser(SOCKET_PORTS[i % 2], cookie, readies[i], arrivals[i]))
            for i in range(clients)
        ]
        await asyncio.gather(*(r.wait() for r in readies))
        connected.set()
        while not done.is_set():
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)  # stragglers
        for task in tasks:
            task.cancel()
        results.put(arrivals)

    asyncio.run(run())


# -- the driver --


def admit_one(cluster, index: int):
    from django.db import transaction
    from django.db.models import Max
    from django.utils import timezone

    from events.models import Event
    from workloads import admission, services

    services.apply(
        cluster, job(index), source="job.yaml", now=timezone.now(), admit=services.Admit.SKIP
    )
    stamp: list[float] = []
    last = Event.objects.aggregate(last=Max("seq"))["last"] or 0
    with transaction.atomic():
        # Registered first, so it runs right after COMMIT and before the publishing hooks.
        transaction.on_commit(lambda: stamp.append(time.time()))
        admission.admit_pending(cluster, timezone.now())
    seqs = list(Event.objects.filter(seq__gt=last).values_list("seq", flat=True))
    return seqs, stamp[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--admissions", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between them")
    args = parser.parse_args()

    fresh_stores()
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True)
    import django

    django.setup()
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils import timezone

    from clusters.models import Cluster
    from workloads import services

    cluster = Cluster.objects.create(name="bench", status=Cluster.Status.RUNNING)
    services.apply(
        cluster, QUEUES, source="queues.yaml", now=timezone.now(), admit=services.Admit.SKIP
    )
    admin = User.objects.create_user("admin", password="bench-only", is_staff=True)
    session = SessionStore()
    session.update(
        {
            SESSION_KEY: str(admin.pk),
            BACKEND_SESSION_KEY: "django.contrib.auth.backends.ModelBackend",
            HASH_SESSION_KEY: admin.get_session_auth_hash(),
        }
    )
    session.create()

    servers = start_sockets_servers()
    context = multiprocessing.get_context("spawn")
    connected, done, results = context.Event(), context.Event(), context.Queue()
    clients = context.Process(
        target=browsers, args=(args.clients, session.session_key, connected, done, results)
    )
    try:
        clients.start()
        if not connected.wait(timeout=60):
            raise SystemExit("the clients did not all connect within 60 s")
        committed: dict[int, float] = {}
        for index in range(args.admissions):
            seqs, at = admit_one(cluster, index)
            committed.update((seq, at) for seq in seqs)
            time.sleep(args.interval)
        done.set()
        arrivals = results.get(timeout=60)
        clients.join(timeout=10)
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=10)

    report(committed, arrivals, args.clients)


def report(committed: dict[int, float], arrivals: list[Arrivals], clients: int) -> None:
    expected = sorted(committed)
    latencies = sorted(
        received - committed[seq]
        for client in arrivals
        for seq, received in client
        if seq in committed
    )
    complete = all(
        [seq for seq, _ in client if seq in committed] == expected for client in arrivals
    )

    def pct(p: float) -> float:
        return float(latencies[min(len(latencies) - 1, int(len(latencies) * p))]) * 1000

    print(  # noqa: T201
        f"ws fanout: {len(expected)} admission events to {clients} clients "
        f"({len(latencies)} deliveries): p50 {pct(0.5):.0f} ms, p95 {pct(0.95):.0f} ms, "
        f"p99 {pct(0.99):.0f} ms (target < 100), max {latencies[-1] * 1000:.0f} ms; "
        f"every client got every event once, in order: {complete}"
    )
    # Kueue's own dashboard is the only Kueue-side figure there is (research/anchors-product.md).
    print(  # noqa: T201
        "Kueue: KueueViz re-sends a full snapshot over each page's WebSocket, debounced 200 ms "
        "after an informer event: every change waits at least that long"
    )
    print(python_speed())  # noqa: T201


if __name__ == "__main__":
    main()
