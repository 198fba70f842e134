"""Objects read from a cluster in the web UI (issue 17): Kueue objects managed elsewhere are
badged, cannot be edited or deleted until an admin adopts them (the button calls the same
service as POST /api/v1/<kind>/<name>/adopt); the owners of workloads submitted outside
Accelplane are badged and offer no scale control."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from events.audit import AUDIT_PREFIX
from events.models import Event
from teams import services as teams
from tests.support import T0
from workloads.models import ClusterQueue, KubeObject

CQ = "/clusters/llm-cluster/kueue/clusterqueue/gpu-queue/"
BADGE = "managed elsewhere</span>"


@pytest.fixture
def read_from_cluster(gpu_queues):
    """gpu-queue as the cluster's watch reads a ClusterQueue made with kubectl."""
    ClusterQueue.objects.filter(name="gpu-queue").update(managed_elsewhere=True)
    return gpu_queues


@pytest.fixture
def admin(read_from_cluster, client):
    client.force_login(User.objects.create_user("root", is_staff=True))
    return client


def test_objects_read_from_the_cluster_are_badged_in_every_list(admin):
    platform = admin.get("/platform/").content.decode()
    queues = admin.get("/queues/?cluster=llm-cluster").content.decode()

    cq_item = platform.split(f'<a href="{CQ}">ClusterQueue/gpu-queue</a>')[1].split("</li>")[0]
    lq_item = platform.split(">LocalQueue/llm/team-llm</a>")[1].split("</li>")[0]
    assert BADGE in cq_item
    assert BADGE not in lq_item  # Accelplane applied it
    assert BADGE in queues.split("ClusterQueue gpu-queue</a>")[1].split("</h3>")[0]
    assert BADGE not in queues.split(">team-llm</a>")[1].split("</th>")[0]


def test_edits_and_deletion_are_refused_with_the_reason_until_adopted(admin):
    shown = admin.get(CQ).content.decode()
    assert BADGE in shown
    assert f'action="{CQ}adopt/"' in shown
    assert f'href="{CQ}yaml/"' not in shown
    assert f'action="{CQ}delete/"' not in shown

    for url in (CQ + "yaml/", CQ + "edit/"):
        refused = admin.get(url)
        assert refused.status_code == 409
        assert "must adopt it before Accelplane changes it" in refused.content.decode()
    spec = ClusterQueue.objects.get(name="gpu-queue").spec
    edited = admin.post(CQ + "yaml/", {"manifest_text": "kind: ClusterQueue\n"})
    deleted = admin.post(CQ + "delete/", {"confirm": "1"})

    assert (edited.status_code, deleted.status_code) == (409, 409)
    assert "not deleted: ClusterQueue/gpu-queue is managed elsewhere" in deleted.content.decode()
    assert ClusterQueue.objects.get(name="gpu-queue").spec == spec


def test_the_adopt_button_adopts_and_the_object_becomes_editable(admin):
    page = admin.get(CQ).content.decode()
    adopt_form = page.split(f'action="{CQ}adopt/"')[1].split("</form>")[0]
    assert 'name="csrfmiddlewaretoken"' in adopt_form
    assert admin.get(CQ + "adopt/").status_code == 405  # POST only

    adopted = admin.post(CQ + "adopt/")

    assert (adopted.status_code, adopted["Location"]) == (302, CQ)
    assert not ClusterQueue.objects.get(name="gpu-queue").managed_elsewhere
    entry = Event.objects.get(kind=f"{AUDIT_PREFIX}adopted")
    assert (entry.object_key, entry.data["user"]) == ("ClusterQueue/gpu-queue", "root")
    shown = admin.get(CQ).content.decode()
    assert BADGE not in shown
    assert f'href="{CQ}yaml/"' in shown
    assert admin.get(CQ + "yaml/").status_code == 200


def test_only_admins_adopt_and_only_with_the_csrf_token(read_from_cluster):
    teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
    alice = Client()
    alice.force_login(User.objects.get(username="alice"))
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(User.objects.create_user("root", is_staff=True))

    assert alice.post(CQ + "adopt/").status_code == 403
    assert strict.post(CQ + "adopt/").status_code == 403
    assert ClusterQueue.objects.get(name="gpu-queue").managed_elsewhere


@pytest.fixture
def foreign(gpu_queues):
    """A Deployment and a RayJob whose Kueue workloads the watch read: opaque owners."""
    teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
    return {
        kind: KubeObject.objects.create(
            cluster=gpu_queues,
            api_version=api_version,
            kind=kind,
            namespace="llm",
            name=name,
            manifest={},
            managed_elsewhere=True,
            created_at=T0,
            updated_at=T0,
        )
        for kind, api_version, name in (
            ("Deployment", "apps/v1", "serve"),
            ("RayJob", "ray.io/v1", "tune"),
        )
    }


def test_owners_submitted_outside_accelplane_are_badged_without_scale(foreign, client):
    client.force_login(User.objects.get(username="alice"))
    listed = client.get("/workloads/").content.decode()
    deployment, ray_job = foreign["Deployment"], foreign["RayJob"]

    for obj in (deployment, ray_job):
        row = listed.split(f">{obj.key}</a>")[1].split("</th>")[0]
        assert "submitted outside Accelplane" in row
        page = client.get(f"/workloads/{obj.pk}/")
        assert page.status_code == 200
        assert "submitted outside Accelplane" in page.content.decode()
        assert 'id="scale-title"' not in page.content.decode()
    assert client.post(f"/workloads/{deployment.pk}/", {"replicas": 3}).status_code == 403

    # The same Deployment, had Accelplane submitted it, could be scaled by its team.
    KubeObject.objects.filter(pk=deployment.pk).update(managed_elsewhere=False)
    assert 'id="scale-title"' in client.get(f"/workloads/{deployment.pk}/").content.decode()
