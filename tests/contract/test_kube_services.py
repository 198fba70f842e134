"""The REST API on a gke cluster: submissions, scales and deletes reach the cluster's
Kubernetes API (the fake), and a refusal there stores nothing."""

from __future__ import annotations

import pytest
import yaml
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from clusters.models import Cluster
from events.models import Event
from teams import services as teams
from tests.support import GPU_QUEUES, T0, deployment, job, row_counts
from workloads import services
from workloads.models import KubeObject, Workload

pytestmark = pytest.mark.django_db

WORKLOADS = "/api/v1/workloads?namespace=llm"


@pytest.fixture
def cluster(fake_kube):
    row = Cluster.objects.create(
        name="real", provider="gke", project="p", status="RUNNING", endpoint=fake_kube.url
    )
    services.apply(row, GPU_QUEUES, source="queues.yaml", now=T0)
    return row


@pytest.fixture
def alice(cluster):
    teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
    _, token = teams.issue_token(User.objects.get(username="alice"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_kueue_objects_are_applied_to_the_cluster(cluster, fake_kube):
    paths = [call.path for call in fake_kube.requests("PATCH")]
    assert "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/gpu-queue" in paths
    assert "/apis/kueue.x-k8s.io/v1beta2/namespaces/llm/localqueues/team-llm" in paths


def test_a_submitted_job_is_applied_as_submitted_and_left_to_kueue(alice, fake_kube):
    response = alice.post(WORKLOADS, job(), content_type="application/yaml")

    assert response.status_code == 201, response.json()
    (call,) = fake_kube.requests("PATCH", "/namespaces/llm/jobs/finetune")
    assert call.query["fieldManager"] == "accelplane"
    assert call.body == {**yaml.safe_load(job()), "metadata": call.body["metadata"]}
    assert call.body["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-llm"}
    # Kueue decides on a real cluster: Accelplane's scheduler admitted nothing.
    assert Workload.objects.get().phase == Workload.Phase.PENDING


def test_scale_and_delete_reach_the_cluster(alice, fake_kube):
    created = alice.post(WORKLOADS, deployment(replicas=1), content_type="application/yaml")
    pk = created.json()["objects"][0]["id"]

    scaled = alice.post(f"/api/v1/workloads/{pk}/scale", {"replicas": 3}, format="json")
    deleted = alice.delete(f"/api/v1/workloads/{pk}")

    assert (scaled.status_code, deleted.status_code) == (200, 204)
    (scale,) = fake_kube.requests("PATCH", "/scale")
    assert scale.body == {"spec": {"replicas": 3}}
    assert len(fake_kube.requests("DELETE", "/deployments/inference")) == 1


def test_an_unreachable_cluster_refuses_the_submission_and_stores_nothing(alice, cluster):
    Cluster.objects.filter(pk=cluster.pk).update(endpoint="http://127.0.0.1:9")
    before = row_counts()

    response = alice.post(WORKLOADS, job(), content_type="application/yaml")

    assert response.status_code == 502
    assert "unreachable" in response.json()["detail"]
    after = row_counts()
    assert after.pop("events.Event") == before.pop("events.Event") + 1
    assert after == before
    assert Event.objects.latest("id").kind == "workload.rejected"
    assert not KubeObject.objects.filter(kind="Job").exists()
