"""Platform admins manage clusters, node pools, Kueue objects, teams and tokens over the API."""

from __future__ import annotations

import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient

from clusters import services
from clusters.models import NodePool
from tests.api.test_workloads import post_manifests
from tests.shared import requires_shared
from tests.support import job
from workloads.models import ClusterQueue, ResourceFlavor

pytestmark = pytest.mark.django_db

TPU_FLAVOR = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: v5e}
spec:
  nodeLabels: {cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice}
"""


def test_createteam_prints_a_working_token_on_its_last_line(gpu_queues, capsys):
    call_command("createteam", "llm", "--namespace", "llm", "--user", "dana")
    token = capsys.readouterr().out.strip().splitlines()[-1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/v1/me").json()["writable_namespaces"] == ["llm"]
    call_command("createteam", "llm", "--namespace", "llm", "--user", "dana")  # idempotent
    assert client.get("/api/v1/me").status_code == 200


def test_createteam_refuses_a_namespace_of_another_team(gpu_queues):
    call_command("createteam", "llm", "--namespace", "llm", "--user", "dana")
    with pytest.raises(Exception, match="already belongs to team 'llm'"):
        call_command("createteam", "vision", "--namespace", "llm", "--user", "erin")


def test_tokens_are_shown_once_stored_hashed_and_revocable(alice):
    created = alice.post("/api/v1/tokens", {"name": "ci"}, format="json").json()
    token = created["token"]
    assert token.startswith("apl_")
    listed = alice.get("/api/v1/tokens").json()["results"]
    assert all(row["token"] is None for row in listed)
    from teams.models import ApiToken

    assert not ApiToken.objects.filter(digest=token).exists()
    ci = APIClient()
    ci.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert ci.get("/api/v1/workloads").status_code == 200
    assert alice.delete(f"/api/v1/tokens/{created['id']}").status_code == 204
    assert ci.get("/api/v1/workloads").status_code == 401


def test_admins_create_node_pools_and_duplicates_or_bad_machines_are_refused(admin, tenants):
    url = f"/api/v1/clusters/{tenants.pk}/nodepools"
    body = {
        "name": "tpu-serving",
        "machine_type": "ct5lp-hightpu-4t",
        "node_count": 1,
        "tpu_topology": "2x2",
    }
    created = admin.post(url, body, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["status"] in ("PROVISIONING", "RUNNING")
    assert admin.post(url, body, format="json").status_code == 409
    bad = admin.post(url, {**body, "name": "x", "machine_type": "n9-mega"}, format="json")
    assert bad.status_code == 400
    assert "n9-mega" in bad.json()["detail"]
    assert NodePool.objects.filter(cluster=tenants).count() == 2


def test_admins_resize_and_delete_node_pools_one_operation_at_a_time(
    admin, alice, tenants, settings, django_capture_on_commit_callbacks
):
    settings.ACCELPLANE_SIM_OPERATION_SECONDS = 0
    (pool,) = NodePool.objects.filter(cluster=tenants)
    url = f"/api/v1/clusters/{tenants.pk}/nodepools/{pool.name}"

    assert alice.patch(url, {"node_count": 3}, format="json").status_code == 403
    with django_capture_on_commit_callbacks(execute=False):  # the worker comes later
        resizing = admin.patch(url, {"node_count": 3}, format="json")
        busy = admin.delete(url)
    refused = admin.patch(url, {"node_count": 0}, format="json")
    missing = admin.delete(f"/api/v1/clusters/{tenants.pk}/nodepools/nope")

    assert resizing.status_code == 202, resizing.json()
    assert (resizing.json()["status"], resizing.json()["node_count"]) == ("RESIZING", 3)
    assert busy.status_code == 409
    assert "is RESIZING" in busy.json()["detail"]
    assert refused.status_code == 400
    assert "node_count" in refused.json()
    assert missing.status_code == 404
    audit = tenants_events("audit.configured")
    assert audit[0]["data"]["before"]["node_count"] == pool.node_count
    assert audit[0]["data"]["after"]["node_count"] == 3

    services.reconcile_node_pool(pool.pk)
    assert admin.get(f"{url.rsplit('/', 1)[0]}").json()[0]["nodes"] == 3
    with django_capture_on_commit_callbacks(execute=False):
        assert admin.delete(url).status_code == 202
    services.reconcile_node_pool(pool.pk)
    assert not NodePool.objects.filter(cluster=tenants).exists()


def test_admins_delete_a_cluster_and_it_goes_once_the_provider_is_done(
    admin, alice, tenants, settings, django_capture_on_commit_callbacks
):
    settings.ACCELPLANE_SIM_OPERATION_SECONDS = 0
    url = f"/api/v1/clusters/{tenants.pk}"

    assert alice.delete(url).status_code == 403
    with django_capture_on_commit_callbacks(execute=False):
        deleting = admin.delete(url)
        again = admin.delete(url)

    assert deleting.status_code == 202
    assert deleting.json()["status"] == "DELETING"
    assert again.status_code == 409
    assert tenants_events("audit.deleted")[0]["object_key"] == f"Cluster/{tenants.name}"
    services.reconcile_cluster(tenants.pk)
    assert admin.get(url).status_code == 404


def tenants_events(kind):
    from events.models import Event

    return list(Event.objects.filter(kind=kind).values("object_key", "data"))


def test_members_read_platform_objects_but_only_admins_change_them(alice, admin, tenants):
    assert alice.get("/api/v1/clusters").status_code == 200
    assert alice.post("/api/v1/clusters", {"name": "mine"}, format="json").status_code == 403
    assert post_manifests(alice, TPU_FLAVOR, path="/api/v1/resourceflavors").status_code == 403
    created = post_manifests(admin, TPU_FLAVOR, path="/api/v1/resourceflavors")
    assert created.status_code == 201, created.json()
    assert created.json()["objects"][0]["manifest"]["spec"]["nodeLabels"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"
    }
    assert alice.get("/api/v1/resourceflavors/v5e").json()["name"] == "v5e"


def test_an_object_of_the_wrong_kind_is_refused_by_a_kind_endpoint(admin):
    response = post_manifests(admin, TPU_FLAVOR, path="/api/v1/clusterqueues")
    assert response.status_code == 400
    assert (response.json()["path"], response.json()["value"]) == ("kind", "ResourceFlavor")
    assert not ResourceFlavor.objects.filter(name="v5e").exists()


def test_a_flavor_in_use_cannot_be_deleted_but_an_unused_one_can(admin):
    assert admin.delete("/api/v1/resourceflavors/l4").status_code == 409
    post_manifests(admin, TPU_FLAVOR, path="/api/v1/resourceflavors")
    assert admin.delete("/api/v1/resourceflavors/v5e").status_code == 204
    assert admin.delete("/api/v1/resourceflavors/v5e").status_code == 404


def test_local_queues_are_addressed_by_namespace_and_name(admin):
    queue = admin.get("/api/v1/localqueues/llm.team-llm").json()
    assert (queue["namespace"], queue["name"]) == ("llm", "team-llm")
    assert queue["manifest"]["spec"]["clusterQueue"] == "gpu-queue"
    assert admin.get("/api/v1/localqueues/vision.team-llm").status_code == 404


def test_cluster_queue_usage_shows_the_gpu_arithmetic(alice, tenants):
    post_manifests(alice, job(pods=1, gpus=2), namespace="llm")
    post_manifests(alice, job(name="second", pods=1, gpus=2), namespace="llm")
    post_manifests(alice, job(name="third", pods=1, gpus=2), namespace="llm")
    post_manifests(alice, job(name="waiting", pods=1, gpus=2), namespace="llm")
    usage = alice.get("/api/v1/clusterqueues/gpu-queue/usage").json()
    gpu = next(r for r in usage["resources"] if r["resource"] == "nvidia.com/gpu")
    assert gpu == {
        "flavor": "l4",
        "resource": "nvidia.com/gpu",
        "nominal": "6",
        "used": "6",
        "borrowed": "0",
        "borrowing_limit": None,
        "lending_limit": None,
        "pending": "2",
    }


def test_teams_are_managed_by_admins_and_members_see_their_own(admin, alice):
    created = admin.post(
        "/api/v1/teams",
        {
            "name": "speech",
            "namespaces": ["speech"],
            "members": [{"username": "alice", "role": "viewer"}],
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    assert created.json()["members"] == [{"username": "alice", "role": "viewer"}]
    clash = admin.post("/api/v1/teams", {"name": "other", "namespaces": ["llm"]}, format="json")
    assert clash.status_code == 409
    assert {t["name"] for t in alice.get("/api/v1/teams").json()["results"]} == {"llm", "speech"}
    assert alice.post("/api/v1/teams", {"name": "x"}, format="json").status_code == 403


@requires_shared
def test_the_kueue_export_validates_against_the_crds(admin, tenants):
    from tests.conformance.test_crd_schemas import errors

    text = admin.get(f"/api/v1/clusters/{tenants.pk}/kueue.yaml").content.decode()
    documents = list(yaml.safe_load_all(text))
    assert {d["kind"] for d in documents} >= {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    assert [d["metadata"]["name"] for d in documents if d["kind"] == "ClusterQueue"] == [
        q.name for q in ClusterQueue.objects.filter(cluster=tenants)
    ]
    assert [e for d in documents for e in errors(d)] == []


def test_the_openapi_schema_and_docs_are_served_without_a_cdn(client):
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/workloads" in schema.content
    docs = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in docs
    assert "cdn" not in docs.lower()
    assert "https://" not in docs


def test_admins_create_clusters_that_a_worker_provisions(admin, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        created = admin.post("/api/v1/clusters", {"name": "tpu-cluster"}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["status"] == "PROVISIONING"
    assert len(callbacks) >= 1  # the provisioning task, enqueued once the row is committed
    assert admin.post("/api/v1/clusters", {"name": "tpu-cluster"}, format="json").status_code == 409
    bad_name = admin.post("/api/v1/clusters", {"name": "TPU cluster!"}, format="json")
    assert bad_name.status_code == 400
    assert "name" in bad_name.json()
    gke = admin.post("/api/v1/clusters", {"name": "real", "provider": "gke"}, format="json")
    assert gke.status_code == 400
    assert "project" in gke.json()


def test_browser_sessions_need_the_csrf_token_to_write(tenants):
    from django.contrib.auth.models import User

    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(User.objects.get(username="alice"))
    assert browser.get("/api/v1/workloads").status_code == 200
    refused = post_manifests(browser, job(), namespace="llm")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]


def test_each_token_has_its_own_rate_limit(alice, bob, settings):
    settings.ACCELPLANE_API_RATE = "3/min"
    assert [alice.get("/api/v1/me").status_code for _ in range(3)] == [200, 200, 200]
    limited = alice.get("/api/v1/me")
    assert limited.status_code == 429
    assert int(limited["Retry-After"]) > 0
    assert bob.get("/api/v1/me").status_code == 200


def test_every_admin_change_is_audited_with_who_before_and_after(admin, alice):
    post_manifests(admin, TPU_FLAVOR, path="/api/v1/resourceflavors")
    changed = TPU_FLAVOR.replace("tpu-v5-lite-podslice", "tpu-v5p-slice")
    post_manifests(admin, changed, path="/api/v1/resourceflavors")
    post_manifests(admin, changed, path="/api/v1/resourceflavors")  # unchanged: not audited
    admin.delete("/api/v1/resourceflavors/v5e")
    admin.post("/api/v1/teams", {"name": "speech", "namespaces": ["speech"]}, format="json")
    events = admin.get("/api/v1/events?limit=1000").json()["events"]
    audits = [e for e in events if e["kind"].startswith("audit.")]
    assert [(e["kind"], e["object"]) for e in audits] == [
        ("audit.created", "ResourceFlavor/v5e"),
        ("audit.configured", "ResourceFlavor/v5e"),
        ("audit.deleted", "ResourceFlavor/v5e"),
        ("audit.created", "Team/speech"),
    ]
    configured = audits[1]["data"]
    assert configured["user"] == "root"
    label = "cloud.google.com/gke-tpu-accelerator"
    assert configured["before"]["spec"]["nodeLabels"][label] == "tpu-v5-lite-podslice"
    assert configured["after"]["spec"]["nodeLabels"][label] == "tpu-v5p-slice"
    assert audits[2]["data"]["after"] is None
    seen_by_alice = alice.get("/api/v1/events?limit=1000").json()["events"]
    assert not [e for e in seen_by_alice if e["kind"].startswith("audit.")]
