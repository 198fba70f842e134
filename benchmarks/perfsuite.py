"""Kueue's scheduler performance suites (kueue-perf.md §1), replayed through Accelplane.

Every submission, admission and finish goes through Accelplane's services, the admission
service and a fresh SQLite database. The clock is virtual and moves in 100 ms ticks (all of the
suites' intervals are multiples of it). Kueue's runs are bounded by its API client
(minimalkueue: QPS 50): one status write per admission gives at most 50 admissions a second,
so admissions per tick are capped at 5. Each suite module describes its queues, nodes and
workload classes and calls `main`.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.machine import python_speed  # noqa: E402
from benchmarks.scratch import scratch_dir  # noqa: E402

os.environ.setdefault("ACCELPLANE_VAR_DIR", scratch_dir())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.pop("DATABASE_URL", None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402

from clusters.models import Cluster  # noqa: E402
from controlplane.celery import freeze_startup_heap  # noqa: E402
from controlplane.prepared import Param, Prepared  # noqa: E402
from events.models import Event  # noqa: E402
from workloads import admission, parking, runtime, services, snapshot  # noqa: E402
from workloads.models import Pod, Workload  # noqa: E402
from workloads.quantities import parse_quantity  # noqa: E402

COHORTS, QUEUES_PER_COHORT = 5, 6
TICK_MS = 100
ADMISSIONS_PER_TICK = 5
START = datetime(2026, 1, 1, tzinfo=UTC)
KUEUE = "kueue.x-k8s.io/v1beta2"


@dataclass(frozen=True)
class Variant:
    """A share of a class's workloads with its own pod template annotations."""

    name: str
    count: int
    annotations: dict[str, str] = field(default_factory=dict)
    kueue_avg_ms: float | None = None


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    interval_ms: int
    runtime_ms: int
    priority: int
    pods: int
    cpu: str
    """Per pod."""
    variants: tuple[Variant, ...]
    kueue_avg_ms: float

    @property
    def count(self) -> int:
        return sum(v.count for v in self.variants)


@dataclass(frozen=True)
class Suite:
    title: str
    classes: tuple[WorkloadClass, ...]
    kueue_wall_ms: float
    kueue_usage: float
    target_wall_s: float
    """Accelplane's target for the whole suite (issue 15)."""
    flavor_spec: dict[str, Any] = field(default_factory=dict)
    extra_documents: tuple[dict[str, Any], ...] = ()
    make_nodes: Callable[[Cluster], None] | None = None


def queue_documents(suite: Suite) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "rf"}}
        | ({"spec": suite.flavor_spec} if suite.flavor_spec else {}),
        *suite.extra_documents,
    ]
    docs += [
        {
            "apiVersion": KUEUE,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": wc.name},
            "value": wc.priority,
        }
        for wc in suite.classes
    ]
    for name, cohort in queue_names():
        docs += [cluster_queue(name, cohort), local_queue(name)]
    return docs


def queue_names() -> list[tuple[str, str]]:
    return [
        (f"cq-{cohort}-{queue}", f"cohort-{cohort}")
        for cohort in range(COHORTS)
        for queue in range(QUEUES_PER_COHORT)
    ]


def cluster_queue(name: str, cohort: str) -> dict[str, Any]:
    """The generator's ClusterQueue: 20 cpu, borrowing limit 100, reclaim Any."""
    quota = {"name": "cpu", "nominalQuota": 20, "borrowingLimit": 100}
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {},
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [{"name": "rf", "resources": [quota]}]}
            ],
        },
    }


def local_queue(cq: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": f"lq-{cq}", "namespace": "perf"},
        "spec": {"clusterQueue": cq},
    }


def job(name: str, queue: str, wc: WorkloadClass, variant: Variant) -> dict[str, Any]:
    container = {"name": "main", "image": "pause", "resources": {"requests": {"cpu": wc.cpu}}}
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
            "parallelism": wc.pods,
            "completions": wc.pods,
            "template": {
                "metadata": {"annotations": variant.annotations},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


def variant_of(wc: WorkloadClass, index: int) -> Variant:
    """The index-th workload of a class (1-based) belongs to this variant."""
    for variant in wc.variants:
        if index <= variant.count:
            return variant
        index -= variant.count
    return wc.variants[-1]


def arrivals(suite: Suite, tick_ms: int, scale: float) -> list[dict[str, Any]]:
    docs = []
    for wc in suite.classes:
        index = tick_ms // wc.interval_ms
        if tick_ms % wc.interval_ms or not 1 <= index <= max(1, round(wc.count * scale)):
            continue
        variant = variant_of(wc, round(index / scale) if scale < 1 else index)
        for cq, _ in queue_names():
            docs.append(job(f"{wc.name}-{variant.name}-{cq}-{index}", f"lq-{cq}", wc, variant))
    return docs


class Finishes:
    """When each admitted workload's run ends, learnt from each tick's admissions: the harness
    plays Kueue's fake job controller, and rereading every admitted workload each tick cost it
    a fifth of the suite's wall time."""

    def __init__(self, cluster: Cluster, runtimes: dict[str, int]):
        self.cluster, self.runtimes = cluster, runtimes
        self.due: list[tuple[datetime, int, datetime]] = []  # heap: (ends, pk, admitted_at)

    def note_admitted(self, now: datetime) -> None:
        for pk, owner in _ADMITTED.rows(cluster=self.cluster.pk, at=now):
            ends = now + timedelta(milliseconds=self.runtimes[owner.split("-")[0]])
            heapq.heappush(self.due, (ends, pk, now))

    def finish_due(self, now: datetime) -> int:
        ended: dict[int, datetime] = {}
        while self.due and self.due[0][0] <= now:
            _, pk, admitted_at = heapq.heappop(self.due)
            ended[pk] = admitted_at
        # Still running as admitted then: not evicted (and perhaps admitted again) since. In
        # the model's order, as the ORM would read them.
        due = sorted(
            (
                row
                for row in snapshot.rows_to_write(self.cluster, ended).values()
                if row.phase == Workload.Phase.ADMITTED and ended[row.pk] == row.admitted_at
            ),
            key=lambda row: (row.queued_at, row.name),
        )
        if not due:
            return 0
        with transaction.atomic():
            runtime.finish(due, now, Workload.Phase.FINISHED)
        return len(due)


# Built once (controlplane/prepared.py), as the finish's read (`rows_to_write`): building
# these statements every tick took the ORM a tenth of the suite.
_ADMITTED = Prepared(
    lambda: (
        Workload.objects.filter(
            cluster_id=Param("cluster"),
            phase=Workload.Phase.ADMITTED,
            admitted_at=Param("at", Workload._meta.get_field("admitted_at")),
        )
        .order_by()
        .values_list("pk", "owner__name")
    )
)


def main(suite: Suite, doc: str) -> None:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the workloads")
    parser.add_argument(
        "--fingerprint",
        action="store_true",
        help="also print a digest of the final workloads, pods and events (to compare runs)",
    )
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    freeze_startup_heap()  # as a worker does once it is ready (controlplane/celery.py)
    cluster = Cluster.objects.create(name="perf", status=Cluster.Status.RUNNING)
    if suite.make_nodes:
        suite.make_nodes(cluster)
    services.apply(cluster, json.dumps(queue_documents(suite)), source="queues.json", now=START)
    finishes = Finishes(cluster, {wc.name: wc.runtime_ms for wc in suite.classes})
    per_queue = sum(max(1, round(wc.count * args.scale)) for wc in suite.classes)
    total = per_queue * COHORTS * QUEUES_PER_COHORT
    started = time.perf_counter()
    tick = finished = 0
    while finished < total:
        tick += TICK_MS
        now = START + timedelta(milliseconds=tick)
        finished += finishes.finish_due(now)
        docs = arrivals(suite, tick, args.scale)
        if docs:
            services.apply(
                cluster, json.dumps(docs), source=f"tick-{tick}", now=now, admit=services.Admit.SKIP
            )
        admission.settle(cluster, now, max_admissions=ADMISSIONS_PER_TICK)
        finishes.note_admitted(now)
    report(suite, cluster, time.perf_counter() - started, tick, total)
    if args.fingerprint:
        print(f"fingerprint            {fingerprint(cluster)}")


def fingerprint(cluster: Cluster) -> str:
    """A digest of everything the run decided: workloads, pods (with their nodes) and events."""
    digest = hashlib.sha256()
    parked = parking.now(cluster.pk)
    workloads = (
        Workload.objects.filter(cluster=cluster)
        .order_by("pk")
        .values_list(
            "name",
            "phase",
            "admission",
            "quota_reserved_at",
            "admitted_at",
            "finished_at",
            "pending_reason",
            "pending_message",
            "parked_release",
            "preempting",
            "evicting",
            "admissions",
            "preemptions",
            "start_step",
            "training_started_at",
            "pk",
        )
    )
    tables = (
        # `parked` in place of the count it is read from.
        ((*row[:8], parked(row[-1], row[8]), *row[9:-1]) for row in workloads),
        Pod.objects.filter(cluster=cluster)
        .order_by("pk")
        .values_list("name", "phase", "node__name", "bound_at", "ready_at", "ready", "scheduling"),
        Event.objects.order_by("pk").values_list("at", "kind", "object_key", "message", "data"),
    )
    for rows in tables:
        for row in rows:
            digest.update(json.dumps(row, default=str, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _mean_wait_ms(rows: Sequence[Workload], prefix: str) -> float:
    waits = [
        (r.quota_reserved_at - r.queued_at).total_seconds() * 1000
        for r in rows
        if r.owner.name.startswith(prefix) and r.quota_reserved_at
    ]
    return sum(waits) / len(waits) if waits else float("nan")


def report(suite: Suite, cluster: Cluster, wall: float, elapsed_ms: int, total: int) -> None:
    rows = list(Workload.objects.filter(cluster=cluster).select_related("owner"))
    queues = COHORTS * QUEUES_PER_COHORT
    print(f"{suite.title}: {total} workloads, {queues} ClusterQueues")
    kueue_wall = suite.kueue_wall_ms / 1000
    print(
        f"wall time              {wall:8.1f} s      (target <= {suite.target_wall_s:.0f} s at full "
        f"scale; Kueue: {kueue_wall:.1f} s real time)"
    )
    print(f"virtual time           {elapsed_ms / 1000:8.1f} s")
    print(f"admissions per second  {sum(r.admissions for r in rows) / wall:8.0f}      (wall)")
    used_cpu_ms = 0.0
    for wc in suite.classes:
        for label, prefix, kueue_ms in _lines(wc):
            mean = _mean_wait_ms(rows, prefix)
            print(
                f"avg time-to-admission {label:<17} {mean / 1000:8.1f} s  "
                f"(Kueue: {kueue_ms / 1000:.1f} s, ratio {mean / kueue_ms:.2f})"
            )
        count = sum(r.owner.name.startswith(wc.name + "-") for r in rows)
        cpu = parse_quantity(wc.cpu, field="cpu") / 1000
        used_cpu_ms += count * wc.pods * cpu * wc.runtime_ms
    usage = 100 * used_cpu_ms / (20 * queues * elapsed_ms)
    print(f"ClusterQueue usage     {usage:8.1f} %    (Kueue: {suite.kueue_usage} %)")
    print(python_speed())


def _lines(wc: WorkloadClass) -> list[tuple[str, str, float]]:
    if len(wc.variants) == 1:
        return [(wc.name, f"{wc.name}-", wc.kueue_avg_ms)]
    return [
        (f"{wc.name} {v.name}", f"{wc.name}-{v.name}-", v.kueue_avg_ms or wc.kueue_avg_ms)
        for v in wc.variants
    ]
