"""A cluster Accelplane did not set up: its Kueue objects and kubectl-submitted Jobs (and their
Kueue Workloads) are read by the watches, shown managed elsewhere, counted in the allocation,
and a ClusterQueue is adopted and then changed by server-side apply without forcing."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from clusters.models import Cluster
from teams import services as teams
from tests.contract.existing import (
    FLAVOR,
    GPU_QUEUE,
    KUBECTL,
    kubectl_job,
    kueue_only,
    read,
)
from tests.contract.test_kube_mirror import pod
from tests.support import NAMESPACE, at
from workloads import services
from workloads.kube import watch
from workloads.manifests import ClusterQueueSpec
from workloads.models import (
    ClusterQueue,
    Configuration,
    KubeObject,
    KubeWatch,
    Pod,
    ResourceFlavor,
    Workload,
)


@pytest.fixture
def cluster(db, existing_kube):
    return Cluster.objects.create(
        name="existing",
        provider="gke",
        project="acme-ml",
        status=Cluster.Status.RUNNING,
        endpoint=existing_kube.url,
    )


@pytest.fixture
def admin():
    client = APIClient()
    client.force_authenticate(User.objects.create_user("root", is_staff=True))
    return client


@pytest.fixture
def alice(db):
    teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
    client = APIClient()
    client.force_authenticate(User.objects.get(username="alice"))
    return client


def test_kueue_objects_are_read_and_marked_managed_elsewhere(cluster, api, admin):
    read(cluster, api)

    listed = admin.get("/api/v1/clusterqueues").json()["results"]
    assert [(q["name"], q["managed_elsewhere"]) for q in listed] == [("gpu-queue", True)]
    assert listed[0]["manifest"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "cpu", "nominalQuota": "48"},
        {"name": "nvidia.com/gpu", "nominalQuota": "8"},
    ]
    local = admin.get("/api/v1/localqueues").json()["results"]
    assert sorted((q["namespace"], q["managed_elsewhere"]) for q in local) == [
        ("llm", True),
        ("research", True),
    ]
    assert admin.get("/api/v1/resourceflavors/l4").json()["managed_elsewhere"] is True
    configuration = Configuration.objects.get(cluster=cluster)
    assert configuration.managed_elsewhere
    assert configuration.spec["wait_for_pods_ready"]["timeout"] == 300
    # The queue that does not parse is recorded with its error; the watch went on.
    unreadable = KubeWatch.objects.get(resource="clusterqueues.kueue.x-k8s.io").unreadable
    assert list(unreadable) == ["ClusterQueue/broken"]
    assert "spec.resourceGroups[0].flavors" in unreadable["ClusterQueue/broken"]


def test_foreign_workloads_are_mirrored_and_counted_in_the_allocation(cluster, api, admin, alice):
    read(cluster, api)

    usage = admin.get("/api/v1/clusterqueues/gpu-queue/usage").json()["resources"]
    used = {r["resource"]: r["used"] for r in usage}
    # finetune: 2 pods x 1 GPU, sweep (a RayJob): 2 pods x 2 GPUs; 2 CPUs a pod.
    assert used == {"cpu": "8", "nvidia.com/gpu": "6"}
    pending = {r["resource"]: r["pending"] for r in usage}
    assert pending["nvidia.com/gpu"] == "2"  # the research Job waits
    objects = admin.get("/api/v1/workloads").json()["results"]
    shown = {(o["kind"], o["namespace"], o["name"]): o for o in objects}
    assert set(shown) == {
        ("Job", "llm", "finetune"),
        ("RayJob", "llm", "sweep"),
        ("Job", "research", "probe"),
    }
    finetune = shown[("Job", "llm", "finetune")]
    assert (finetune["managed_elsewhere"], finetune["phase"]) == (True, "Admitted")
    assert finetune["workloads"][0]["flavors"] == {"main": {"nvidia.com/gpu": "l4", "cpu": "l4"}}
    assert finetune["workloads"][0]["priority"] == 100
    # Attributed by namespace: the llm team sees its own; "research" has no team (admins only).
    team_view = alice.get("/api/v1/workloads").json()["results"]
    assert sorted(o["name"] for o in team_view) == ["finetune", "sweep"]


def test_foreign_objects_cannot_be_changed_through_accelplane(cluster, api, admin):
    read(cluster, api)
    finetune = KubeObject.objects.get(name="finetune")

    response = admin.delete(f"/api/v1/workloads/{finetune.pk}")

    assert response.status_code == 409
    assert "managed elsewhere" in response.json()["detail"]


def test_a_finished_job_ends_its_workload_and_a_deleted_one_goes(cluster, api, fake_kube):
    read(cluster, api)
    done = kubectl_job("finetune", "llm", 1)
    done["status"] = {
        "conditions": [
            {"type": "Complete", "status": "True", "lastTransitionTime": "2025-01-01T01:00:00Z"}
        ]
    }
    fake_kube.put(done)
    read(cluster, api, watch.JOBS)
    assert Workload.objects.get(name="job-finetune-1a2b3").phase == "Finished"

    fake_kube.remove(done)
    read(cluster, api, watch.JOBS)
    assert not KubeObject.objects.filter(name="finetune").exists()
    assert not Workload.objects.filter(name="job-finetune-1a2b3").exists()


def test_lists_are_paginated(cluster, api, fake_kube, monkeypatch):
    monkeypatch.setattr(watch, "LIST_PAGE", 2)

    read(cluster, api, watch.WORKLOADS)

    lists = [c for c in fake_kube.requests("GET", "/workloads") if "watch" not in c.query]
    assert [(c.query["limit"], c.query.get("continue", "")) for c in lists] == [
        ("2", ""),
        ("2", lists[1].query["continue"]),
    ]
    assert lists[1].query["continue"]
    assert Workload.objects.count() == 3


def test_a_dropped_watch_and_an_expired_version_are_survived(cluster, api, fake_kube):
    queues = kueue_only("clusterqueues")
    read(cluster, api, queues)
    bigger = copy.deepcopy(GPU_QUEUE)
    bigger["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "16"
    fake_kube.put(bigger, manager=KUBECTL)
    spare = {**copy.deepcopy(GPU_QUEUE), "metadata": {"name": "spare"}}
    fake_kube.put(spare, manager=KUBECTL)
    fake_kube.drop_next_watch(after=1)

    (dropped,) = read(cluster, api, queues)
    assert dropped.disconnected
    assert not ClusterQueue.objects.filter(name="spare").exists()  # not streamed yet
    (resumed,) = read(cluster, api, queues)
    assert not resumed.relisted
    assert set(ClusterQueue.objects.values_list("name", flat=True)) == {"gpu-queue", "spare"}
    assert gpu_quota("gpu-queue") == 16_000

    # Deleted while the version expired: the relist forgets it.
    fake_kube.remove(spare)
    fake_kube.compact()
    (expired,) = read(cluster, api, queues)
    assert expired.relisted
    assert set(ClusterQueue.objects.values_list("name", flat=True)) == {"gpu-queue"}


def gpu_quota(name: str) -> int:
    spec = ClusterQueueSpec.from_stored(ClusterQueue.objects.get(name=name).spec)
    return next(q.nominal for _, r, q in spec.quotas() if r == "nvidia.com/gpu")


def apply_queue(client: APIClient, text: str) -> Any:
    return client.post("/api/v1/clusterqueues", text, content_type="application/yaml")


def changed_queue(gpus: str, **spec: Any) -> str:
    body = copy.deepcopy(GPU_QUEUE)
    del body["status"]
    body["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = gpus
    body["spec"].update(spec)
    return yaml.safe_dump(body)


def test_a_clusterqueue_is_adopted_then_applied_by_ssa_and_conflicts_are_reported(
    cluster, api, admin, fake_kube
):
    read(cluster, api)
    patches = len(fake_kube.requests("PATCH"))

    refused = admin.post(
        "/api/v1/clusterqueues",
        changed_queue("8", stopPolicy="Hold"),
        content_type="application/yaml",
    )
    assert refused.status_code == 409
    assert "managed elsewhere" in refused.json()["detail"]
    assert len(fake_kube.requests("PATCH")) == patches  # nothing reached the cluster

    adopted = admin.post("/api/v1/clusterqueues/gpu-queue/adopt")
    assert (adopted.status_code, adopted.json()["managed_elsewhere"]) == (200, False)

    # A field kubectl owns, changed: the apiserver's conflict, reported, not forced.
    conflict = admin.post(
        "/api/v1/clusterqueues", changed_queue("12"), content_type="application/yaml"
    )
    assert conflict.status_code == 409, conflict.json()
    assert conflict.json()["conflicts"] == [{"manager": KUBECTL, "field": ".spec.resourceGroups"}]
    assert gpu_quota("gpu-queue") == 8_000
    # A field nobody else owns: applied by server-side apply as Accelplane, without force.
    applied = admin.post(
        "/api/v1/clusterqueues",
        changed_queue("8", stopPolicy="Hold"),
        content_type="application/yaml",
    )
    assert applied.status_code == 200, applied.json()
    call = fake_kube.requests("PATCH", "/clusterqueues/gpu-queue")[-1]
    assert call.query == {"fieldManager": "accelplane"}
    assert (
        fake_kube.get("kueue.x-k8s.io", "clusterqueues", "", "gpu-queue")["spec"]["stopPolicy"]
        == "Hold"
    )
    assert ClusterQueue.objects.get(name="gpu-queue").spec["stop_policy"] == "Hold"


def test_a_kueue_object_accelplane_applied_is_its_own(cluster, api):
    a100 = FLAVOR | {"metadata": {"name": "a100"}}
    services.apply(cluster, yaml.safe_dump(a100), source="t.yaml", now=at())

    read(cluster, api, kueue_only("resourceflavors"))

    assert dict(ResourceFlavor.objects.values_list("name", "managed_elsewhere")) == {
        "a100": False,
        "l4": True,
    }


def test_the_pages_show_the_foreign_workloads_and_queues(cluster, api, client):
    read(cluster, api)
    client.force_login(User.objects.create_user("root", is_staff=True))

    workloads_page = client.get("/workloads/").content.decode()
    queues_page = client.get("/queues/").content.decode()

    for name in ("finetune", "sweep", "probe"):
        assert name in workloads_page
    assert "gpu-queue" in queues_page


def test_pods_listed_before_their_kubectl_jobs_workloads_are_kept(cluster, fake_kube, settings):
    """The watches of an imported cluster start together: the pods' first list waits for the
    Workloads' (which makes the rows of kubectl's Jobs), or running pods, never changing
    again, would never be attributed."""
    settings.ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS = True  # the fake serves plain http
    assert NAMESPACE == "llm"  # the namespace of the kubectl Job "finetune"
    fake_kube.put(pod("finetune-0-q8r4t", labels={"batch.kubernetes.io/job-name": "finetune"}))

    assert watch.run_session(cluster.pk, watch.PODS.resource, 1) == watch.RETRY_SECONDS
    listed = KubeWatch.objects.filter(cluster=cluster).exclude(resource_version="")
    assert not listed.filter(resource="pods").exists()
    assert not Pod.objects.filter(cluster=cluster).exists()

    assert watch.run_session(cluster.pk, watch.WORKLOADS.resource, 1) == 0
    assert watch.run_session(cluster.pk, watch.PODS.resource, 1) == 0
    (kept,) = Pod.objects.filter(cluster=cluster)
    assert (kept.name, kept.owner.kind, kept.owner.name) == ("finetune-0-q8r4t", "Job", "finetune")
    assert kept.workload is not None
    assert kept.workload.name == "job-finetune-1a2b3"
