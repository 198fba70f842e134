"""Teams submit, list, scale, delete and follow their workloads over /api/v1/workloads."""

from __future__ import annotations

import json

import pytest
import yaml
from rest_framework.test import APIClient

from tests.support import deployment, job, row_counts
from workloads.models import KubeObject, Workload

pytestmark = pytest.mark.django_db


def post_manifests(
    client, text, path="/api/v1/workloads", content_type="application/yaml", **params
):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return client.post(f"{path}?{query}" if query else path, text, content_type=content_type)


def test_a_job_posted_as_yaml_is_stored_with_its_kueue_workload(alice):
    response = post_manifests(alice, job(), namespace="llm")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["applied"] == [{"key": "Job/llm/finetune", "action": "created"}]
    (obj,) = body["objects"]
    assert (obj["kind"], obj["namespace"], obj["name"], obj["queue"]) == (
        "Job",
        "llm",
        "finetune",
        "team-llm",
    )
    (workload,) = obj["workloads"]
    assert workload["phase"] == "QuotaReserved" or workload["phase"] == "Admitted"
    assert workload["flavors"] == {"main": {"cpu": "l4", "memory": "l4", "nvidia.com/gpu": "l4"}}


def test_applying_the_same_manifest_again_changes_nothing_and_a_new_one_updates(alice):
    post_manifests(alice, job(), namespace="llm")
    again = post_manifests(alice, job(), namespace="llm")
    assert again.status_code == 200
    assert again.json()["applied"][0]["action"] == "unchanged"
    changed = post_manifests(alice, job(step_time="30s"), namespace="llm")
    assert changed.json()["applied"][0]["action"] == "configured"
    assert KubeObject.objects.filter(kind="Job").count() == 1


def test_json_manifests_are_accepted(alice):
    body = yaml.safe_load(deployment(replicas=2))
    body["metadata"]["namespace"] = "llm"
    response = post_manifests(alice, json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.json()
    assert len(response.json()["objects"][0]["workloads"]) == 2


def test_an_invalid_manifest_is_refused_with_its_field_path_and_nothing_is_stored(alice):
    before = row_counts()
    bad = job().replace("parallelism: 2", "parallelism: two")
    response = post_manifests(alice, deployment() + "---\n" + bad, namespace="llm")
    assert response.status_code == 400
    error = response.json()
    assert (error["document"], error["path"], error["value"]) == (2, "spec.parallelism", "two")
    assert "Job llm/finetune" in error["detail"]
    counts = row_counts()
    # The refusal itself is recorded as an event; nothing else changed.
    assert counts.pop("events.Event") == before.pop("events.Event") + 1
    assert counts == before


def test_yaml_that_does_not_parse_is_a_400_naming_the_line(alice):
    response = post_manifests(alice, "kind: Job\nmetadata: [unclosed\n", namespace="llm")
    assert response.status_code == 400
    assert "line" in response.json()["detail"]


def test_payloads_over_the_documented_limit_answer_413(alice, settings):
    settings.ACCELPLANE_MAX_MANIFEST_BYTES = 1000
    response = post_manifests(alice, job() + "#" * 2000, namespace="llm")
    assert response.status_code == 413
    assert "1000 bytes" in response.json()["detail"]
    assert not KubeObject.objects.exists()


def test_requests_without_a_valid_token_answer_401():
    anonymous = APIClient()
    assert anonymous.get("/api/v1/workloads").status_code == 401
    anonymous.credentials(HTTP_AUTHORIZATION="Bearer apl_not-a-token")
    assert anonymous.get("/api/v1/workloads").status_code == 401


def test_a_submitter_cannot_create_kueue_objects(alice):
    queue = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: x}\n"
    response = post_manifests(alice, queue)
    assert response.status_code == 403
    assert "platform admins" in response.json()["detail"]


def test_list_filters_by_kind_phase_and_queue(alice):
    post_manifests(alice, deployment(replicas=1) + "---\n" + job(pods=3), namespace="llm")
    everything = alice.get("/api/v1/workloads").json()
    assert everything["count"] == 2
    jobs = alice.get("/api/v1/workloads?kind=Job").json()["results"]
    assert [o["kind"] for o in jobs] == ["Job"]
    pending = alice.get("/api/v1/workloads?phase=Pending").json()["results"]
    assert [o["name"] for o in pending] == ["finetune"]  # 6 GPUs: the Deployment's 2, then 6 more
    assert alice.get("/api/v1/workloads?queue=elsewhere").json()["count"] == 0
    assert alice.get("/api/v1/workloads?phase=Bogus").status_code == 400


def test_scaling_a_deployment_adds_workloads_and_a_job_cannot_be_scaled(alice):
    created = post_manifests(alice, deployment(replicas=1) + "---\n" + job(), namespace="llm")
    ids = {o["kind"]: o["id"] for o in created.json()["objects"]}
    scaled = alice.post(
        f"/api/v1/workloads/{ids['Deployment']}/scale", {"replicas": 3}, format="json"
    )
    assert scaled.status_code == 200
    assert len(scaled.json()["workloads"]) == 3
    refused = alice.post(f"/api/v1/workloads/{ids['Job']}/scale", {"replicas": 3}, format="json")
    assert refused.status_code == 400
    assert refused.json()["path"] == "spec.replicas"
    negative = alice.post(
        f"/api/v1/workloads/{ids['Deployment']}/scale", {"replicas": -1}, format="json"
    )
    assert negative.status_code == 400
    assert "replicas" in negative.json()


def test_deleting_a_workload_frees_its_quota(alice):
    created = post_manifests(alice, job(pods=3), namespace="llm").json()["objects"][0]
    assert alice.delete(f"/api/v1/workloads/{created['id']}").status_code == 204
    assert not Workload.objects.exists()
    assert alice.get(f"/api/v1/workloads/{created['id']}").status_code == 404


def test_the_events_of_a_workload_come_in_sequence_order_and_page_by_after(alice):
    created = post_manifests(alice, job(), namespace="llm").json()["objects"][0]
    events = alice.get(f"/api/v1/workloads/{created['id']}/events").json()
    kinds = [e["kind"] for e in events["events"]]
    assert kinds[:2] == ["object.created", "workload.submitted"]
    assert "workload.admitted" in kinds
    seqs = [e["seq"] for e in events["events"]]
    assert seqs == sorted(seqs)
    after = alice.get(f"/api/v1/workloads/{created['id']}/events?after={seqs[0]}&limit=1").json()
    assert [e["seq"] for e in after["events"]] == [seqs[1]]
    assert after["next_after"] == seqs[1]


def test_a_training_job_reports_checkpoints_with_its_own_token(alice):
    created = post_manifests(alice, job(), namespace="llm").json()["objects"][0]
    token = alice.get(f"/api/v1/workloads/{created['id']}").json()["checkpoint_token"]
    trainer = APIClient()
    trainer.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    url = f"/api/v1/workloads/{created['id']}/checkpoints"
    saved = trainer.post(url, {"step": 120, "path": "gs://b/ckpt-120"}, format="json")
    assert saved.status_code == 201, saved.json()
    assert trainer.post(url, {"step": 100}, format="json").status_code == 409
    listed = alice.get(url).json()
    assert [(c["step"], c["path"]) for c in listed] == [(120, "gs://b/ckpt-120")]
    other = post_manifests(alice, job(name="other"), namespace="llm").json()["objects"][0]
    # The token is bound to its workload.
    assert (
        trainer.post(
            f"/api/v1/workloads/{other['id']}/checkpoints", {"step": 1}, format="json"
        ).status_code
        == 404
    )
    assert trainer.get("/api/v1/workloads").status_code == 401
