"""Kueue's baseline scheduler performance suite (kueue-perf.md §1a), in virtual time.

5 cohorts x 6 ClusterQueues (nominal 20 cpu, borrowingLimit 100, reclaimWithinCohort Any,
withinClusterQueue LowerPriority); per ClusterQueue 350 small (1 cpu, priority 50, every
100 ms, runs 200 ms), 100 medium (5 cpu, 100, every 500 ms, 500 ms) and 50 large (20 cpu,
200, every 1200 ms, 1000 ms): 15,000 single-pod Jobs. Every submission, finish and admission
goes through Accelplane's services, admission service and a fresh SQLite database; the clock
is virtual and moves in 100 ms ticks (all of the suite's intervals are multiples of it), and
admissions per tick are capped as Kueue's API client caps them (ADMISSIONS_PER_TICK).
Prints wall time, admissions per second, each class's mean time-to-admission and the
ClusterQueue usage beside Kueue's published figures.

    python benchmarks/kueue_baseline.py [--scale 0.2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("ACCELPLANE_VAR_DIR", tempfile.mkdtemp(prefix="accelplane-bench-"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.pop("DATABASE_URL", None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402

from clusters.models import Cluster  # noqa: E402
from workloads import runtime, services  # noqa: E402
from workloads.models import Workload  # noqa: E402

COHORTS, QUEUES_PER_COHORT = 5, 6
TICK_MS = 100
# Kueue's perf runs are bounded by its API client (minimalkueue: QPS 50): one status write
# per admission gives at most 50 admissions a second, 5 per tick.
ADMISSIONS_PER_TICK = 5
START = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    count: int
    interval_ms: int
    runtime_ms: int
    priority: int
    cpu: int
    kueue_avg_ms: float


CLASSES = (
    WorkloadClass("small", 350, 100, 200, 50, 1, 215_468),
    WorkloadClass("medium", 100, 500, 500, 100, 5, 76_768),
    WorkloadClass("large", 50, 1200, 1000, 200, 20, 16_501),
)
KUEUE_WALL_MS, KUEUE_USAGE = 351_116, 55.9


def queue_manifests() -> str:
    docs: list[dict[str, object]] = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "rf"},
        }
    ]
    for wc in CLASSES:
        docs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": wc.name},
                "value": wc.priority,
            }
        )
    for cohort in range(COHORTS):
        for queue in range(QUEUES_PER_COHORT):
            name = f"cq-{cohort}-{queue}"
            docs.append(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ClusterQueue",
                    "metadata": {"name": name},
                    "spec": {
                        "cohortName": f"cohort-{cohort}",
                        "namespaceSelector": {},
                        "preemption": {
                            "reclaimWithinCohort": "Any",
                            "withinClusterQueue": "LowerPriority",
                        },
                        "resourceGroups": [
                            {
                                "coveredResources": ["cpu"],
                                "flavors": [
                                    {
                                        "name": "rf",
                                        "resources": [
                                            {
                                                "name": "cpu",
                                                "nominalQuota": 20,
                                                "borrowingLimit": 100,
                                            }
                                        ],
                                    }
                                ],
                            }
                        ],
                    },
                }
            )
            docs.append(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": f"lq-{name}", "namespace": "perf"},
                    "spec": {"clusterQueue": name},
                }
            )
    return json.dumps(docs)


def job(name: str, queue: str, wc: WorkloadClass) -> dict[str, object]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "perf",
            "labels": {
                "kueue.x-k8s.io/queue-name": queue,
                "kueue.x-k8s.io/priority-class": wc.name,
            },
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "pause",
                            "resources": {"requests": {"cpu": str(wc.cpu)}},
                        }
                    ],
                }
            },
        },
    }


def arrivals(tick_ms: int, scale: float) -> list[dict[str, object]]:
    docs = []
    for wc in CLASSES:
        count = max(1, round(wc.count * scale))
        index = tick_ms // wc.interval_ms
        if tick_ms % wc.interval_ms == 0 and 1 <= index <= count:
            for cohort in range(COHORTS):
                for queue in range(QUEUES_PER_COHORT):
                    cq = f"cq-{cohort}-{queue}"
                    docs.append(job(f"{wc.name}-{cq}-{index}", f"lq-{cq}", wc))
    return docs


def finish_due(cluster: Cluster, now: datetime, runtimes: dict[str, int]) -> int:
    due = []
    for row in Workload.objects.filter(
        cluster=cluster, phase=Workload.Phase.ADMITTED
    ).select_related("owner", "cluster"):
        assert row.admitted_at is not None
        if row.admitted_at + timedelta(milliseconds=runtimes[row.owner.name.split("-")[0]]) <= now:
            due.append(row)
    with transaction.atomic():
        runtime.finish(due, now, Workload.Phase.FINISHED)
    return len(due)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the workloads")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    cluster = Cluster.objects.create(name="perf", status=Cluster.Status.RUNNING)
    services.apply(cluster, queue_manifests(), source="queues.json", now=START)
    runtimes = {wc.name: wc.runtime_ms for wc in CLASSES}
    total = (
        sum(max(1, round(wc.count * args.scale)) for wc in CLASSES) * COHORTS * QUEUES_PER_COHORT
    )
    started = time.perf_counter()
    tick, finished = 0, 0
    while finished < total:
        tick += TICK_MS
        now = START + timedelta(milliseconds=tick)
        finished += finish_due(cluster, now, runtimes)
        docs = arrivals(tick, args.scale)
        if docs:
            services.apply(cluster, json.dumps(docs), source=f"tick-{tick}", now=now, admit=False)
        runtime.settle(cluster, now, max_admissions=ADMISSIONS_PER_TICK)
    wall = time.perf_counter() - started
    report(cluster, wall, tick, total)


def report(cluster: Cluster, wall: float, elapsed_ms: int, total: int) -> None:
    rows = list(Workload.objects.filter(cluster=cluster).select_related("owner"))
    print(f"Kueue baseline suite: {total} workloads, {COHORTS * QUEUES_PER_COHORT} ClusterQueues")
    print(
        f"wall time              {wall:8.1f} s      (Kueue: {KUEUE_WALL_MS / 1000:.1f} s real time)"
    )
    print(f"virtual time           {elapsed_ms / 1000:8.1f} s")
    print(f"admissions per second  {sum(r.admissions for r in rows) / wall:8.0f}      (wall)")
    used_cpu_ms = 0.0
    for wc in CLASSES:
        waits = [
            (r.quota_reserved_at - r.queued_at).total_seconds() * 1000
            for r in rows
            if r.owner.name.startswith(wc.name + "-") and r.quota_reserved_at
        ]
        mean = sum(waits) / len(waits) if waits else float("nan")
        ratio = mean / wc.kueue_avg_ms
        print(
            f"avg time-to-admission {wc.name:<6} {mean / 1000:8.1f} s  "
            f"(Kueue: {wc.kueue_avg_ms / 1000:.1f} s, ratio {ratio:.2f})"
        )
        used_cpu_ms += sum(
            wc.cpu * wc.runtime_ms for r in rows if r.owner.name.startswith(wc.name + "-")
        )
    nominal = 20 * COHORTS * QUEUES_PER_COHORT
    usage = 100 * used_cpu_ms / (nominal * elapsed_ms)
    print(f"ClusterQueue usage     {usage:8.1f} %    (Kueue: {KUEUE_USAGE} %)")


if __name__ == "__main__":
    main()
