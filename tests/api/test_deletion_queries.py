"""Deleting or scaling down an object over the REST API removes its workloads in the same few
statements however many replicas it has: no statement per workload."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from events.models import Event
from tests.api.test_workloads import post_manifests
from tests.support import T0, deployment
from workloads import admission
from workloads.models import KubeObject, Pod, Workload

pytestmark = pytest.mark.django_db


def submitted(client, name: str, replicas: int) -> KubeObject:
    """A Deployment of `replicas` replicas of 1 GPU in a queue of 6: up to 6 admitted."""
    response = post_manifests(client, deployment(name, replicas=replicas, gpus=1), namespace="llm")
    assert response.status_code == 201, response.json()
    obj = KubeObject.objects.get(name=name)
    admission.advance(obj.cluster, T0, T0)
    return obj


def queries_to_delete(client, obj: KubeObject) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.delete(f"/api/v1/workloads/{obj.pk}")
    assert response.status_code == 204
    return len(captured)


def test_deleting_an_object_costs_the_same_queries_however_many_replicas(alice, settings):
    settings.ACCELPLANE_ADMISSION = "worker"
    small, large = submitted(alice, "small", 2), submitted(alice, "large", 4)
    assert Pod.objects.filter(owner=large).exists()  # admitted: pods to delete too

    assert queries_to_delete(alice, small) == queries_to_delete(alice, large)
    assert not Workload.objects.filter(owner__name__in=["small", "large"]).exists()
    assert not Pod.objects.filter(owner__name__in=["small", "large"]).exists()
    deleted = Event.objects.filter(kind="workload.deleted", object_key="Deployment/llm/large")
    assert deleted.count() == 4


def test_scaling_down_removes_replicas_in_the_same_queries_however_many(alice, settings):
    settings.ACCELPLANE_ADMISSION = "worker"

    def queries_to_scale(obj: KubeObject, replicas: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            response = alice.post(
                f"/api/v1/workloads/{obj.pk}/scale",
                {"replicas": replicas},
                content_type="application/json",
            )
        assert response.status_code == 200, response.json()
        return len(captured)

    small, large = submitted(alice, "small", 2), submitted(alice, "large", 4)
    assert queries_to_scale(small, 1) == queries_to_scale(large, 1)
    assert Workload.objects.filter(owner=large).count() == 1
    deleted = Event.objects.filter(kind="workload.deleted", object_key="Deployment/llm/large")
    assert deleted.count() == 3
