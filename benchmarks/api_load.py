"""Workload submissions per second over the REST API, with N concurrent clients (targets:
at least 300/s, p99 under 100 ms on this 2-core machine), against the full stack.

Starts `make stack`'s processes (two web servers, two workers, beat) on a fresh PostgreSQL
database and Redis database, gives every client its own team token, and has each client
POST Jobs (YAML) in a loop, alternating between the two web servers. Prints throughput,
latency percentiles and errors, then checks that no ClusterQueue admitted past its quota.

    python benchmarks/api_load.py [--clients 16] [--requests 40]
"""

from __future__ import annotations

import argparse
import http.client
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import redis

ROOT = Path(__file__).resolve().parents[1]
DATABASE = "accelplane_bench"
PG = "postgres://postgres@127.0.0.1:5432"
REDIS_URL = "redis://127.0.0.1:6379/5"
PORT = 8200

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


def client(
    number: int, token: str, requests: int, latencies: list[float], errors: list[str]
) -> None:
    connections = [http.client.HTTPConnection("127.0.0.1", PORT + i, timeout=30) for i in (0, 1)]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    for index in range(requests):
        conn = connections[index % 2]
        started = time.perf_counter()
        conn.request(
            "POST", f"/api/v1/workloads?namespace=team-{number}", job(number, index), headers
        )
        response = conn.getresponse()
        response.read()
        latencies.append(time.perf_counter() - started)
        if response.status != 201:
            errors.append(str(response.status))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=40, help="per client")
    args = parser.parse_args()
    fresh_stores()
    env = {
        **os.environ,
        "DATABASE_URL": f"{PG}/{DATABASE}",
        "REDIS_URL": REDIS_URL,
        "ACCELPLANE_VAR_DIR": tempfile.mkdtemp(prefix="accelplane-bench-"),
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
        threads = [
            threading.Thread(target=client, args=(i, tokens[i], args.requests, latencies, errors))
            for i in range(args.clients)
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
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
    check = subprocess.run(
        [python, "manage.py", "shell", "-c", QUOTA_CHECK],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    print(check.stdout.strip() or check.stderr.strip())  # noqa: T201


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
