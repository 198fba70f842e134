"""Admission cycles racing on PostgreSQL never reserve the same quota twice."""

from __future__ import annotations

from collections import Counter

import pytest

from events.models import Event
from tests.integration.workers import race
from tests.support import NAMESPACE, at, deployment
from workloads import admission, services
from workloads.models import Workload

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 6
REPLICAS = 8  # 2 GPUs each: 16 GPUs pending against a quota of 6
GPU_QUOTA = 6000  # milli-units


@pytest.fixture
def pending_gpu_workloads(gpu_queues):
    """More pending GPU workloads than quota, none admitted yet (apply without admission)."""
    services.apply(
        gpu_queues,
        deployment(replicas=REPLICAS),
        source="inference.yaml",
        now=at(),
        namespace=NAMESPACE,
        admit=services.Admit.SKIP,
    )
    assert Workload.objects.filter(phase=Workload.Phase.PENDING).count() == REPLICAS
    return gpu_queues


def reserved_gpus():
    total = 0
    for row in Workload.objects.filter(phase__in=Workload.HOLDING_QUOTA):
        requests = {p["name"]: p["requests"] for p in row.pod_sets}
        for assignment in row.assignments:
            total += requests[assignment["name"]].get("nvidia.com/gpu", 0) * assignment["count"]
    return total


def test_racing_admission_cycles_never_reserve_more_than_the_quota(pending_gpu_workloads):
    errors = race(lambda: admission.admit_pending(pending_gpu_workloads, at(minutes=1)), THREADS)

    assert errors == []
    assert 0 < reserved_gpus() <= GPU_QUOTA


def test_racing_admission_cycles_admit_each_workload_at_most_once(pending_gpu_workloads):
    errors = race(lambda: admission.admit_pending(pending_gpu_workloads, at(minutes=1)), THREADS)

    assert errors == []
    reservations = Counter(
        Event.objects.filter(kind="workload.quota_reserved").values_list("workload_name", flat=True)
    )
    assert sum(reservations.values()) == GPU_QUOTA // 2000
    assert set(reservations.values()) == {1}
