"""`/metrics` in Prometheus' text format, with Kueue's metric names where Kueue has one.

Queue and workload figures are read from the database at scrape time, so every web process
answers the same whatever process admitted the workloads; request and event-stream figures
are this process's own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Gauge, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from clusters.models import Cluster
from events.models import Event
from workloads import parking
from workloads.models import LocalQueue, Workload
from workloads.quantities import parse_quantity
from workloads.status import every_cluster_queue_usage

WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0)

REQUEST_SECONDS = Histogram(
    "accelplane_http_request_duration_seconds",
    "Time to answer an HTTP request, by method and status code",
    ["method", "status"],
)
WEBSOCKETS = Gauge("accelplane_event_stream_connections", "Open /ws/events/ connections")


class QueueCollector(Collector):
    """Kueue's ClusterQueue and workload metrics, computed from the rows."""

    def describe(self) -> Iterator[Metric]:
        return iter(())  # registering must not query the database (collect would)

    def collect(self) -> Iterator[Metric]:
        clusters = {c.pk: c.name for c in Cluster.objects.all()}
        yield from self._workloads(clusters)
        yield from self._quota()
        yield self._wait_times(clusters)
        yield self._preemptions()
        events = GaugeMetricFamily(
            "accelplane_events", "Events in the log (the latest sequence number)"
        )
        events.add_metric([], float(Event.objects.aggregate(last=Max("seq"))["last"] or 0))
        yield events

    def _workloads(self, clusters: dict[int, str]) -> Iterator[Metric]:
        target = {
            (lq.cluster_id, lq.namespace, lq.name): lq.cluster_queue_name
            for lq in LocalQueue.objects.all()
        }
        pending: Counter[tuple[str, str, str]] = Counter()
        reserving: Counter[tuple[str, str]] = Counter()
        admitted: Counter[tuple[str, str]] = Counter()
        active = Workload.objects.filter(phase__in=Workload.ACTIVE_PHASES)
        rows = active.values_list(
            "pk",
            "cluster_id",
            "namespace",
            "queue_name",
            "cluster_queue_name",
            "phase",
            "parked_release",
        )
        parked = parking.everywhere(clusters)
        for pk, cluster_id, namespace, queue, cq, phase, count in rows:
            cluster = clusters[cluster_id]
            if phase == Workload.Phase.PENDING:
                cq = target.get((cluster_id, namespace, queue), "")
                inadmissible = parked[cluster_id](pk, count)
                pending[(cluster, cq, "inadmissible" if inadmissible else "active")] += 1
                continue
            reserving[(cluster, cq)] += 1
            if phase == Workload.Phase.ADMITTED:
                admitted[(cluster, cq)] += 1
        yield _gauge(
            "kueue_pending_workloads",
            "Pending workloads, by ClusterQueue and status",
            ["cluster", "cluster_queue", "status"],
            pending,
        )
        yield _gauge(
            "kueue_reserving_active_workloads",
            "Workloads holding quota in the ClusterQueue",
            ["cluster", "cluster_queue"],
            reserving,
        )
        yield _gauge(
            "kueue_admitted_active_workloads",
            "Admitted workloads in the ClusterQueue",
            ["cluster", "cluster_queue"],
            admitted,
        )

    def _quota(self) -> Iterator[Metric]:
        labels = ["cluster", "cluster_queue", "flavor", "resource"]
        usage = GaugeMetricFamily(
            "kueue_cluster_queue_resource_usage",
            "Quota in use, by flavor and resource",
            labels=labels,
        )
        nominal = GaugeMetricFamily(
            "kueue_cluster_queue_nominal_quota",
            "Nominal quota, by flavor and resource",
            labels=labels,
        )
        for cq, report in every_cluster_queue_usage():
            for row in report["resources"]:
                key = [cq.cluster.name, cq.name, row["flavor"], row["resource"]]
                usage.add_metric(key, _amount(row["used"]))
                nominal.add_metric(key, _amount(row["nominal"]))
        yield usage
        yield nominal

    def _wait_times(self, clusters: dict[int, str]) -> Metric:
        """Queue time of every admission still on record (admitted_at - queued_at)."""
        waits: dict[tuple[str, str], list[float]] = {}
        rows = Workload.objects.filter(admitted_at__isnull=False).values_list(
            "cluster_id", "cluster_queue_name", "queued_at", "admitted_at"
        )
        for cluster_id, cq, queued, admitted in rows:
            assert admitted is not None  # filtered above
            seconds = max(0.0, (admitted - queued).total_seconds())
            waits.setdefault((clusters[cluster_id], cq), []).append(seconds)
        family = HistogramMetricFamily(
            "kueue_admission_wait_time_seconds",
            "Time from queueing to admission",
            labels=["cluster", "cluster_queue"],
        )
        for key, values in waits.items():
            buckets = [(str(b), float(sum(v <= b for v in values))) for b in WAIT_BUCKETS]
            buckets.append(("+Inf", float(len(values))))
            family.add_metric(list(key), buckets, sum(values))
        return family

    def _preemptions(self) -> Metric:
        counts: Counter[tuple[str, str]] = Counter()
        data = Event.objects.filter(kind="workload.preempted").values_list("cluster", "data")
        for cluster, fields in data:
            counts[(cluster, str(fields.get("reason", "")))] += 1
        family = CounterMetricFamily(
            "kueue_preempted_workloads",
            "Preemptions, by reason (counted from the append-only event log)",
            labels=["cluster", "reason"],
        )
        for key, count in counts.items():
            family.add_metric(list(key), float(count))
        return family


def _gauge(name: str, doc: str, labels: list[str], counts: Counter[Any]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for key, count in sorted(counts.items()):
        family.add_metric(list(key), float(count))
    return family


def _amount(quantity: str) -> float:
    return parse_quantity(quantity, field="metric", bounded=False) / 1000  # sums pass the bound


REGISTRY.register(QueueCollector())


def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


def observe_requests(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[..., HttpResponse]:
    """Middleware: every answer's duration, by method and status code."""

    def middleware(request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = get_response(request)
        REQUEST_SECONDS.labels(request.method, str(response.status_code)).observe(
            time.perf_counter() - started
        )
        return response

    return middleware
