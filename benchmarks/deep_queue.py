"""One ClusterQueue admits 10,000 queued workloads that fit, in live mode (target: under 2 s).

Kueue pops one workload per ClusterQueue per scheduling cycle (kueue-perf.md §4, issue
#14477: ~9.6 admissions/min for a deep queue on a busy production cluster). Accelplane admits
every head that fits in one cycle. The 10,000 Jobs (1 cpu each) are queued first, then the
live tick (the Celery beat task `tick_clusters` runs `admission.advance(cluster, now, now)`) is
called until all are Admitted. Printed: when the last of them was Admitted (its admission run
committed; Kueue's time-to-admission, the figure the target is for), how long the ticks took
(they go on to bind and start the 10,000 pods, as kube-scheduler and the kubelets would), and
the number of ticks.

    python benchmarks/deep_queue.py [--workloads 10000] [--database-url postgres://...]

SQLite (a new file) unless `--database-url` names a PostgreSQL server: the benchmark then
creates a database of its own there (`accelplane_bench_<pid>`) and drops it at the end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from pathlib import Path

_parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_parser.add_argument("--workloads", type=int, default=10_000)
_parser.add_argument("--database-url", default="", help="a PostgreSQL server (default: SQLite)")
ARGS = _parser.parse_args()

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.machine import python_speed  # noqa: E402
from benchmarks.scratch import scratch_dir  # noqa: E402

os.environ.setdefault("ACCELPLANE_VAR_DIR", scratch_dir())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
# Every Job in one apply: past the limits a tenant's request has (docs/api.md, "Limits").
for _limit in ("DOCUMENTS", "EXPANDED_MANIFEST_BYTES", "PODS_PER_REQUEST"):
    os.environ.setdefault(f"ACCELPLANE_MAX_{_limit}", str(2**40))
os.environ.pop("DATABASE_URL", None)
if ARGS.database_url:
    os.environ["DATABASE_URL"] = ARGS.database_url
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))  # one machine's, throwaway

import django  # noqa: E402

django.setup()

import yaml  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from clusters import services as cluster_services  # noqa: E402
from clusters.models import Cluster  # noqa: E402
from workloads import admission, services  # noqa: E402
from workloads.models import Workload  # noqa: E402

KUEUE = "kueue.x-k8s.io/v1beta2"
KUEUE_PER_MINUTE = 9.6  # one deep ClusterQueue, production (kueue-perf.md §4)


def queues(workloads: int) -> str:
    quota = [
        {"name": "cpu", "nominalQuota": workloads},
        {"name": "memory", "nominalQuota": f"{workloads}Gi"},
    ]
    docs = [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "deep"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [{"name": "default", "resources": quota}],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "bench"},
            "spec": {"clusterQueue": "deep"},
        },
    ]
    return yaml.safe_dump_all(docs)


def jobs(count: int) -> str:
    return yaml.safe_dump_all(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"job-{i}",
                "namespace": "bench",
                "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            },
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "c",
                                "image": "busybox",
                                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                            }
                        ],
                    }
                }
            },
        }
        for i in range(count)
    )


def main() -> None:
    if connection.vendor == "postgresql":
        # A database of its own, as the test runner makes one (migrated), dropped at the end.
        connection.settings_dict["TEST"]["NAME"] = f"accelplane_bench_{os.getpid()}"
        name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
        try:
            run(ARGS.workloads)
        finally:
            connection.creation.destroy_test_db(name, verbosity=0)
    else:
        call_command("migrate", verbosity=0)
        run(ARGS.workloads)


def _timed(name: str, spent: dict[str, float], admitted_at: list[float]) -> None:
    """Wraps `admission.<name>` to add up the seconds spent in it, and to note when a call
    that admitted workloads returned (committed) in `admitted_at`."""
    inner = getattr(admission, name)

    def timed(*args, **kwargs):
        started = time.perf_counter()
        result = None
        try:
            result = inner(*args, **kwargs)
            return result
        finally:
            ended = time.perf_counter()
            spent[name] = spent.get(name, 0.0) + ended - started
            if getattr(result, "admitted", None):
                admitted_at.append(ended)

    setattr(admission, name, timed)


def run(count: int) -> None:
    cluster = Cluster.objects.create(name="deep", status=Cluster.Status.RUNNING)
    hosts = count // 120 + 1  # n2-standard-128 hosts, ~125 allocatable cores each
    cluster_services.provision_now(
        cluster, name="cpu", machine_type="n2-standard-128", node_count=hosts
    )
    now = timezone.now()
    services.apply(cluster, queues(count), source="queues.yaml", now=now)
    services.apply(cluster, jobs(count), source="jobs.yaml", now=now, admit=services.Admit.SKIP)
    queued = Workload.objects.filter(cluster=cluster, phase=Workload.Phase.PENDING).count()
    spent: dict[str, float] = {}
    admitted_at: list[float] = []
    _timed("admit_pending", spent, admitted_at)  # Kueue's part: quota reserved, Admitted
    _timed("_simulate_round", spent, admitted_at)  # kube-scheduler's, kubelets': pods started
    started, ticks = time.perf_counter(), 0
    admitted = 0
    while admitted < queued:
        now = timezone.now()
        admission.advance(cluster, now, now)
        ticks += 1
        admitted = Workload.objects.filter(cluster=cluster, phase=Workload.Phase.ADMITTED).count()
    seconds = time.perf_counter() - started
    kueue_minutes = queued / KUEUE_PER_MINUTE
    print(  # noqa: T201
        f"deep queue ({connection.vendor}): {queued} workloads admitted in "
        f"{admitted_at[-1] - started:.2f} s (target < 2 s); the {ticks} tick(s), which also "
        f"bound and started their pods, took {seconds:.2f} s"
    )
    print(  # noqa: T201
        f"  of which admission {spent.get('admit_pending', 0):.2f} s, the simulated cluster "
        f"(binding and starting pods) {spent.get('_simulate_round', 0):.2f} s"
    )
    print(  # noqa: T201
        f"  Kueue pops one per ClusterQueue per cycle: {queued} cycles, "
        f"~{kueue_minutes:.0f} min at its production rate of {KUEUE_PER_MINUTE}/min"
    )
    print(python_speed())  # noqa: T201


if __name__ == "__main__":
    main()
