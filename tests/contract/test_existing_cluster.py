"""Issue 17 end to end, against the fake GKE and Kubernetes APIs: a GKE cluster made with gcloud,
whose apiserver already holds Kueue objects and kubectl-submitted Jobs with their Kueue
Workloads, is imported; the watcher's sessions read it (through a dropped stream); the API and
the pages show the foreign workloads with the ClusterQueue's allocation, explain and what-if
count them as holders; an admin adopts the ClusterQueue and changes it. Then the same against
a Kueue that serves kueue.x-k8s.io/v1beta1 only (before Kueue 0.15)."""

from __future__ import annotations

import copy

import pytest
import yaml
from django.contrib.auth.models import User

from clusters.models import Cluster
from tests.contract import existing
from tests.contract.fake_gke import existing_cluster
from workloads.kube import watch
from workloads.models import ClusterQueue, Workload

# Two pods of 2 GPUs: the queue's 8 hold 6 for finetune and sweep, so it waits.
MINE = yaml.safe_dump(existing.kubectl_job("tune", "llm", 2))
HOLDERS = {"job-finetune-1a2b3", "rayjob-sweep-4c5d6"}


@pytest.fixture
def imported(staff_api, fake_gke, gke_endpoint, existing_kube, django_capture_on_commit_callbacks):
    """ml-prod imported through the API; GKE reports the fake apiserver as its endpoint."""
    found = {**existing_cluster(), "endpoint": existing_kube.url}
    fake_gke.add_existing(existing.PROJECT, existing.REGION, found)
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_api.post("/api/v1/clusters", existing.IMPORT, format="json")
    assert response.status_code == 201, response.content
    return Cluster.objects.get(name="ml-prod")


def run_watcher(cluster: Cluster) -> None:
    """One session of every watch, as the watcher task runs them."""
    for resource in watch.WATCHED:
        assert watch.run_session(cluster.pk, resource, timeout_seconds=1) == 0, resource


def queue_yaml(version: str, **spec: object) -> str:
    body = existing.in_version(copy.deepcopy(existing.GPU_QUEUE), version)
    del body["status"]
    body["spec"].update(spec)
    return yaml.safe_dump(body)


def test_an_imported_cluster_shows_adopts_and_explains_what_it_already_ran(
    imported, staff_api, existing_kube, client
):
    run_watcher(imported)
    # A stream cut mid-way: the next session resumes where it stopped, and misses nothing.
    for name in ("spare", "more"):
        queue = {**copy.deepcopy(existing.GPU_QUEUE), "metadata": {"name": name}}
        del queue["spec"]["cohortName"]  # lending to gpu-queue would let it borrow
        existing_kube.put(queue, manager=existing.KUBECTL)
    existing_kube.drop_next_watch(after=1)
    queues = "clusterqueues.kueue.x-k8s.io"
    assert watch.run_session(imported.pk, queues, 1) == watch.RETRY_SECONDS
    assert not ClusterQueue.objects.filter(name="more").exists()
    run_watcher(imported)
    names = set(ClusterQueue.objects.values_list("name", flat=True))
    assert names == {"gpu-queue", "spare", "more"}

    # The API: the queue's allocation counts what kubectl's Jobs hold.
    usage = staff_api.get("/api/v1/clusterqueues/gpu-queue/usage").json()["resources"]
    assert {r["resource"]: r["used"] for r in usage} == {"cpu": "8", "nvidia.com/gpu": "6"}
    owners = staff_api.get("/api/v1/workloads").json()["results"]
    assert {(o["kind"], o["name"], o["managed_elsewhere"]) for o in owners} == {
        ("Job", "finetune", True),
        ("RayJob", "sweep", True),
        ("Job", "probe", True),
    }

    # What-if decides from the mirrored state as Kueue would, and sends nothing to the cluster.
    patches = len(existing_kube.requests("PATCH"))
    asked = staff_api.post(
        "/api/v1/whatif?cluster=ml-prod",
        yaml.safe_dump(existing.kubectl_job("maybe", "llm", 2)),
        content_type="application/yaml",
    )
    assert asked.status_code == 200, asked.content
    (outcome,) = asked.json()["workloads"]
    assert outcome["result"] == "pending"
    assert outcome["pending"]["reason"] == "WaitingForQuota"
    assert len(existing_kube.requests("PATCH")) == patches
    assert not Workload.objects.filter(owner__name="maybe").exists()

    # Accelplane's own Job waits behind them: explain names them as holders.
    submitted = staff_api.post(
        "/api/v1/workloads?cluster=ml-prod",
        MINE,
        content_type="application/yaml",
    )
    assert submitted.status_code in (200, 201), submitted.content
    mine = Workload.objects.get(owner__name="tune")
    explained = staff_api.get(f"/api/v1/workloads/{mine.owner_id}/explain").json()
    (report,) = explained["workloads"]
    assert [q["used"] for q in report["quota"]] == ["8", "6"]
    assert {b["name"] for b in report["blockers"]} == HOLDERS

    # The pages.
    client.force_login(User.objects.get(username="root"))
    queues_page = client.get("/queues/").content.decode()
    workloads_page = client.get("/workloads/").content.decode()
    cluster_page = client.get("/clusters/ml-prod/").content.decode()
    assert "gpu-queue" in queues_page
    assert "managed elsewhere" in queues_page
    assert all(name in workloads_page for name in ("finetune", "sweep", "probe", "tune"))
    assert "Connection to the apiserver" in cluster_page

    # Adopted, then changed by server-side apply as Accelplane.
    adopted = staff_api.post("/api/v1/clusterqueues/gpu-queue/adopt?cluster=ml-prod")
    assert (adopted.status_code, adopted.json()["managed_elsewhere"]) == (200, False)
    held = staff_api.post(
        "/api/v1/clusterqueues?cluster=ml-prod",
        queue_yaml("v1beta2", stopPolicy="Hold"),
        content_type="application/yaml",
    )
    assert held.status_code == 200, held.content
    served = existing_kube.get("kueue.x-k8s.io", "clusterqueues", "", "gpu-queue")
    assert served["spec"]["stopPolicy"] == "Hold"


@pytest.fixture
def kueue_v1beta1(fake_kube):
    """A Kueue before 0.15: kueue.x-k8s.io/v1beta1 only, its objects spelled that way."""
    fake_kube.kueue_versions = frozenset({"v1beta1"})
    fake_kube.max_watch_seconds = 0.05
    existing.fill(fake_kube, "v1beta1")
    return fake_kube


def test_a_kueue_serving_only_v1beta1_is_read_and_applied_in_v1beta1(
    db, kueue_v1beta1, api, staff_api
):
    cluster = Cluster.objects.create(
        name="old-kueue", provider="gke", status="RUNNING", endpoint=kueue_v1beta1.url
    )
    existing.read(cluster, api)

    queue = ClusterQueue.objects.get(name="gpu-queue")
    assert (queue.managed_elsewhere, queue.spec["cohort"]) == (True, "ml")
    sweep = Workload.objects.get(name="rayjob-sweep-4c5d6")
    assert (sweep.phase, sweep.priority_class_name) == ("Admitted", "batch")
    usage = staff_api.get("/api/v1/clusterqueues/gpu-queue/usage").json()["resources"]
    assert {r["resource"]: r["used"] for r in usage}["nvidia.com/gpu"] == "6"
    lists = {c.path for c in kueue_v1beta1.requests("GET") if c.path.startswith("/apis/kueue")}
    assert "/apis/kueue.x-k8s.io/v1beta1/clusterqueues" in lists
    assert not any("/v1beta2/" in path for path in lists)

    staff_api.post("/api/v1/clusterqueues/gpu-queue/adopt?cluster=old-kueue")
    # A v1beta2 manifest is written as v1beta1: cohortName becomes cohort.
    held = staff_api.post(
        "/api/v1/clusterqueues?cluster=old-kueue",
        queue_yaml("v1beta2", stopPolicy="Hold"),
        content_type="application/yaml",
    )
    assert held.status_code == 200, held.content
    (patch,) = kueue_v1beta1.requests("PATCH", "/clusterqueues/gpu-queue")
    assert patch.path == "/apis/kueue.x-k8s.io/v1beta1/clusterqueues/gpu-queue"
    assert patch.body["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert patch.body["spec"]["cohort"] == "ml"
    assert "cohortName" not in patch.body["spec"]
    # What v1beta1 cannot say is refused, naming the version the cluster serves.
    refused = staff_api.post(
        "/api/v1/clusterqueues?cluster=old-kueue",
        queue_yaml("v1beta2", concurrentAdmissionPolicy={"enabled": True}),
        content_type="application/yaml",
    )
    assert refused.status_code == 409, refused.content
    assert "serves kueue.x-k8s.io/v1beta1" in refused.json()["detail"]
    assert ClusterQueue.objects.get(name="gpu-queue").spec["stop_policy"] == "Hold"
