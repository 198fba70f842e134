"""/metrics: Kueue's queue metrics from the database, request metrics, request ids in logs."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.middleware import RequestIdFilter
from tests.support import at, deployment, job, submit
from workloads import admission, runtime, services
from workloads.models import ParkedSet

pytestmark = pytest.mark.django_db


def samples(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def labels(**values):
    return tuple(sorted(values.items()))


def test_queue_metrics_follow_admission_and_preemption(client, gpu_queues):
    services.apply(
        gpu_queues,
        deployment(replicas=1) + "---\n" + job(pods=2),
        source="w.yaml",
        namespace="llm",
        now=at(),
    )
    admission.advance(gpu_queues, at(), at(minutes=10))
    inference = services.get_object(gpu_queues, "Deployment", "llm", "inference")
    services.scale(inference, 2, at(minutes=10))  # the fine-tune is preempted
    found = samples(client)
    cq = {"cluster": "llm-cluster", "cluster_queue": "gpu-queue"}
    assert found[("kueue_admitted_active_workloads", labels(**cq))] == 2
    assert (
        found[("kueue_pending_workloads", labels(**cq, status="inadmissible"))]
        + found.get(("kueue_pending_workloads", labels(**cq, status="active")), 0)
        == 1
    )
    gpu = labels(**cq, flavor="l4", resource="nvidia.com/gpu")
    assert found[("kueue_cluster_queue_nominal_quota", gpu)] == 6
    assert found[("kueue_cluster_queue_resource_usage", gpu)] == 4
    assert (
        found[
            (
                "kueue_preempted_workloads_total",
                labels(cluster="llm-cluster", reason="InClusterQueue"),
            )
        ]
        == 1
    )
    waits = found[("kueue_admission_wait_time_seconds_count", labels(**cq))]
    assert waits == 2  # the two inference pods; the preempted fine-tune holds no admission


def test_parked_workloads_are_inadmissible_by_their_own_count_or_by_a_set(client, gpu_queues):
    """Parked at first by their own count, and after a requeue parked again in a set: both
    times inadmissible."""
    submit(gpu_queues, "big", gpus=6)
    admission.admit_pending(gpu_queues, at())
    for name in ("first", "second"):
        submit(gpu_queues, name, gpus=2)
    admission.admit_pending(gpu_queues, at())
    inadmissible = (
        "kueue_pending_workloads",
        labels(cluster="llm-cluster", cluster_queue="gpu-queue", status="inadmissible"),
    )
    assert samples(client)[inadmissible] == 2

    runtime.unpark(gpu_queues, at())
    admission.admit_pending(gpu_queues, at(seconds=1))

    assert ParkedSet.objects.filter(cluster_id=gpu_queues.pk).exists()
    assert samples(client)[inadmissible] == 2


def test_requests_are_counted_and_tagged_with_a_request_id(client, caplog, settings):
    # The console handler tags each record with its request's id. Root's handlers are process
    # state (constructing a Celery worker replaces them: tests/unit/test_watch_capacity.py), so
    # the records captured here get the same filter from the first request on, and only here:
    # pytest's capturing handler serves every test of the session.
    assert "request_id" in settings.LOGGING["handlers"]["console"]["filters"]
    key = ("accelplane_http_request_duration_seconds_count", labels(method="GET", status="401"))
    counted = samples(client).get(key, 0)  # the process's count: earlier tests' requests too
    tag = RequestIdFilter()
    caplog.handler.addFilter(tag)
    try:
        first = client.get("/api/v1/me", HTTP_X_REQUEST_ID="trace-42")
        fresh = client.get("/api/v1/me")["X-Request-ID"]
        client.get("/api/v1/me", HTTP_X_REQUEST_ID="trace-43")  # django.request logs the 401s
    finally:
        caplog.handler.removeFilter(tag)
    assert first["X-Request-ID"] == "trace-42"
    assert len(fresh) == 32  # a fresh one when the caller sends none
    logged = [r for r in caplog.records if r.getMessage() == "Unauthorized: /api/v1/me"]
    assert [r.request_id for r in logged] == ["trace-42", fresh, "trace-43"]
    assert samples(client)[key] == counted + 3
