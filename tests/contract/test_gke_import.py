"""Importing a GKE cluster made outside Accelplane, against the fake GKE API: the API, the
admin page, and what deleting an imported cluster or pool does (and does not do) in GKE."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile

from clusters import services
from clusters.models import Cluster, NodePool
from clusters.providers.sim import SimProvider
from events.models import Event
from tests.contract.existing import IMPORT, PROJECT, REGION
from tests.contract.fake_gke import existing_cluster

pytestmark = pytest.mark.usefixtures("gke_endpoint")


def post_import(staff_api, django_capture_on_commit_callbacks, **changes):
    with django_capture_on_commit_callbacks(execute=True):
        return staff_api.post("/api/v1/clusters", {**IMPORT, **changes}, format="json")


def test_an_imported_cluster_has_gkes_node_pools_and_nothing_is_created(
    staff_api, fake_gke, in_gke, django_capture_on_commit_callbacks
):
    response = post_import(staff_api, django_capture_on_commit_callbacks)

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["imported"], body["status"], body["release_channel"], body["version"]) == (
        True,
        "RUNNING",
        "REGULAR",
        "1.33.2-gke.1111000",
    )
    pools = {p["name"]: p for p in body["node_pools"]}
    shown = {
        name: (
            p["machine_type"],
            p["node_count"],
            p["zone"],
            p["accelerator_type"],
            p["accelerator_count"],
            p["min_node_count"],
            p["max_node_count"],
            p["tpu_topology"],
            p["placement_type"],
            p["imported"],
            p["status"],
        )
        for name, p in pools.items()
    }
    assert shown == {
        "default-pool": ("e2-standard-4", 1, "", "", 0, None, None, "", "", True, "RUNNING"),
        "l4-pool": (
            "g2-standard-24",
            2,
            "us-central1-a",
            "nvidia-l4",
            2,
            0,
            6,
            "",
            "",
            True,
            "RUNNING",
        ),
        # GKE reports no accelerators for TPU hosts: the catalog's chips per host.
        "v5e-slice": (
            "ct5lp-hightpu-4t",
            4,
            "us-central1-b",
            "tpu-v5-lite-podslice",
            4,
            None,
            None,
            "4x4",
            "COMPACT",
            True,
            "RUNNING",
        ),
    }
    cluster = Cluster.objects.get(name="ml-prod")
    assert cluster.endpoint == "10.0.0.9"  # where the watches will reach its apiserver
    # Recorded, not created: only reads went to GKE, and no task touches the pools.
    assert {c.method for c in fake_gke.calls} == {"GET"}
    assert not NodePool.objects.filter(cluster=cluster).exclude(status="RUNNING").exists()
    assert Event.objects.filter(kind="cluster.imported", cluster="ml-prod").exists()


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        (
            {"name": "ml-dev"},
            "name",
            "has no GKE cluster 'ml-dev' in us-central1 (it has: batch, ml-prod)",
        ),
        ({"location": "europe-west4"}, "name", "(it has: none)"),
        ({"provider": "sim"}, "import", "only a gke cluster is imported"),
        ({"project": ""}, "project", "needs its project id"),
        ({"autopilot": True}, "autopilot", "comes from GKE"),
        ({"import": "perhaps"}, "import", "Must be a valid boolean"),
    ],
)
def test_a_bad_import_is_a_400_naming_the_field_and_stores_nothing(
    staff_api, in_gke, django_capture_on_commit_callbacks, changes, field, says
):
    response = post_import(staff_api, django_capture_on_commit_callbacks, **changes)

    assert response.status_code == 400, response.content
    assert says in " ".join(response.json()[field])
    assert not Cluster.objects.exists()


def test_gke_refusing_the_listing_is_a_400_on_the_project(
    staff_api, fake_gke, in_gke, django_capture_on_commit_callbacks
):
    fake_gke.fail_next("PERMISSION_DENIED", "Required 'container.clusters.list' permission.")

    response = post_import(staff_api, django_capture_on_commit_callbacks)

    assert response.status_code == 400
    assert "container.clusters.list" in response.json()["project"][0]
    assert not Cluster.objects.exists()


def test_a_cluster_gke_is_still_creating_is_not_imported(
    staff_api, fake_gke, django_capture_on_commit_callbacks
):
    fake_gke.add_existing(PROJECT, REGION, {**existing_cluster(), "status": "PROVISIONING"})

    response = post_import(staff_api, django_capture_on_commit_callbacks)

    assert response.status_code == 400
    assert "cluster ml-prod is PROVISIONING in GKE" in response.json()["name"][0]
    assert not Cluster.objects.exists()
    assert not NodePool.objects.exists()


def test_a_taken_name_is_a_conflict(staff_api, in_gke, django_capture_on_commit_callbacks):
    Cluster.objects.create(name="ml-prod")

    assert post_import(staff_api, django_capture_on_commit_callbacks).status_code == 409


def test_deleting_an_imported_pool_or_cluster_forgets_it_and_leaves_gke_alone(
    staff_api, fake_gke, in_gke, django_capture_on_commit_callbacks
):
    cluster_id = post_import(staff_api, django_capture_on_commit_callbacks).json()["id"]
    pools = f"/api/v1/clusters/{cluster_id}/nodepools"

    assert staff_api.delete(f"{pools}/l4-pool").status_code == 204
    assert staff_api.delete(f"/api/v1/clusters/{cluster_id}").status_code == 204

    assert not Cluster.objects.exists()
    assert not NodePool.objects.exists()
    assert not fake_gke.requests("DELETE")
    assert [p["name"] for p in fake_gke.clusters[in_gke]["nodePools"]] == [
        "default-pool",
        "l4-pool",
        "v5e-slice",
    ]
    forgotten = Event.objects.filter(kind__endswith=".forgotten").values_list("kind", "object_key")
    assert list(forgotten) == [
        ("node_pool.forgotten", "NodePool/ml-prod/l4-pool"),
        ("cluster.forgotten", "Cluster/ml-prod"),
    ]


def test_an_admin_may_ask_to_delete_an_imported_pool_in_gke_too(
    staff_api, fake_gke, in_gke, django_capture_on_commit_callbacks
):
    cluster_id = post_import(staff_api, django_capture_on_commit_callbacks).json()["id"]
    pool = f"/api/v1/clusters/{cluster_id}/nodepools/l4-pool"

    assert staff_api.delete(f"{pool}?delete_in_gke=yes").status_code == 400
    with django_capture_on_commit_callbacks(execute=False):  # the test drives the task
        response = staff_api.delete(f"{pool}?delete_in_gke=true")

    assert response.status_code == 202
    row = NodePool.objects.get(name="l4-pool")
    assert row.status == "DELETING"
    services.reconcile_node_pool(row.pk)
    assert fake_gke.requests("DELETE", "/nodePools/l4-pool")


def test_the_admin_page_lists_the_projects_clusters_then_imports_the_one_picked(
    db, client, fake_gke, in_gke, sa_key
):
    client.force_login(User.objects.create_user("root", is_staff=True))
    key = ("key.json", json.dumps(sa_key).encode())
    listed = client.post(
        "/platform/clusters/import/",
        {
            "project": PROJECT,
            "location": REGION,
            "service_account_key": SimpleUploadedFile(*key, content_type="application/json"),
        },
    )
    page = listed.content.decode()
    assert listed.status_code == 200
    assert 'value="ml-prod"' in page
    assert 'value="batch"' in page
    assert "l4-pool (2 × g2-standard-24, 2 × nvidia-l4)" in page

    # The key uploaded with the listing is kept server-side for the pick.
    picked = client.post(
        "/platform/clusters/import/", {"project": PROJECT, "location": REGION, "name": "ml-prod"}
    )

    assert picked.status_code == 302
    assert picked.url == "/clusters/ml-prod/"
    cluster = Cluster.objects.get(name="ml-prod")
    assert cluster.imported
    assert cluster.service_account_key
    assert json.dumps(sa_key) not in str(client.session.items())
    assert set(cluster.node_pools.values_list("name", flat=True)) == {
        "default-pool",
        "l4-pool",
        "v5e-slice",
    }
    shown = client.get("/clusters/ml-prod/").content.decode()
    assert "forget cluster ml-prod" in shown
    assert "Connection to the apiserver" in shown


def test_the_admin_page_names_a_cluster_that_is_not_there(db, client, in_gke):
    client.force_login(User.objects.create_user("root", is_staff=True))

    response = client.post(
        "/platform/clusters/import/", {"project": PROJECT, "location": REGION, "name": "ml-dev"}
    )

    assert response.status_code == 400
    assert "has no GKE cluster" in response.content.decode()
    assert not Cluster.objects.exists()


def test_a_simulated_project_lists_no_clusters():
    assert SimProvider(0).list_clusters(PROJECT, REGION) == []
