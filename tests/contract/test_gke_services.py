"""clusters.services with provider "gke" against the fake GKE API: the reconcile tasks' contract."""

from __future__ import annotations

import pytest

from clusters import services
from clusters.models import Cluster, NodePool
from clusters.providers.gke import GkeProvider
from events.models import Event
from tests.contract.fake_gke import FAKE_CA_CERTIFICATE

CLUSTER_PATH = "projects/acme-ml/locations/us-central1/clusters/llm-cluster"


class WorkerCrashed(Exception):
    """The worker died right after GKE accepted a create, before the operation id was saved."""


@pytest.fixture(autouse=True)
def gke_endpoint(settings, fake_gke):
    settings.ACCELPLANE_GKE_ENDPOINT = fake_gke.url


@pytest.fixture
def cluster(db, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):  # the test drives the tasks
        return services.create_cluster(
            name="llm-cluster",
            provider="gke",
            project="acme-ml",
            location="us-central1",
            slice_controller=True,
        )


@pytest.fixture
def gpu_pool(cluster, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        return services.create_node_pool(
            cluster,
            name="gpupool",
            machine_type="g2-standard-24",
            node_count=3,
            zone="us-central1-c",
        )


def reconcile_until_done(reconcile, pk):
    for _ in range(10):
        if reconcile(pk).done:
            return
    raise AssertionError("never finished")


def crash_after(create):
    def create_then_crash(self, spec):
        create(self, spec)
        raise WorkerCrashed

    return create_then_crash


def test_a_gke_cluster_is_created_once_and_runs(cluster, fake_gke):
    fake_gke.polls_to_finish = 3
    first = services.reconcile_cluster(cluster.pk)
    operation_id = Cluster.objects.get(pk=cluster.pk).operation_id
    second = services.reconcile_cluster(cluster.pk)  # a restarted task resumes the same operation
    reconcile_until_done(services.reconcile_cluster, cluster.pk)

    assert (first.done, second.done) == (False, False)
    assert operation_id.startswith("projects/acme-ml/locations/us-central1/operations/")
    cluster.refresh_from_db()
    assert (cluster.status, cluster.operation_id) == (Cluster.Status.RUNNING, operation_id)
    assert len(fake_gke.requests("POST", "/clusters")) == 1
    sent = fake_gke.requests("POST", "/clusters")[0].body["cluster"]
    assert sent["addonsConfig"]["sliceControllerConfig"] == {"enabled": True}
    assert Event.objects.filter(kind="cluster.created").count() == 1


def test_a_running_cluster_keeps_its_kubernetes_endpoint_and_ca(cluster, fake_gke):
    reconcile_until_done(services.reconcile_cluster, cluster.pk)

    cluster.refresh_from_db()
    # What the Kubernetes backend connects with (workloads/kube/client.py).
    assert (cluster.endpoint, cluster.ca_certificate) == ("10.0.0.2", FAKE_CA_CERTIFICATE)


def test_a_crash_before_the_operation_is_saved_does_not_create_a_second_cluster(
    cluster, fake_gke, monkeypatch
):
    monkeypatch.setattr(GkeProvider, "create_cluster", crash_after(GkeProvider.create_cluster))
    with pytest.raises(WorkerCrashed):
        services.reconcile_cluster(cluster.pk)
    monkeypatch.undo()
    assert Cluster.objects.get(pk=cluster.pk).operation_id == ""

    reconcile_until_done(services.reconcile_cluster, cluster.pk)

    cluster.refresh_from_db()
    assert (cluster.status, cluster.operation_id) == (Cluster.Status.RUNNING, CLUSTER_PATH)
    assert len(fake_gke.requests("POST", "/clusters", status=200)) == 1
    assert list(fake_gke.clusters) == [CLUSTER_PATH]


def test_a_pool_waits_for_its_cluster_then_gets_nodes_from_the_catalog(cluster, gpu_pool, fake_gke):
    waiting = services.reconcile_node_pool(gpu_pool.pk)
    assert not waiting.done
    assert fake_gke.requests("POST", "/nodePools") == []

    reconcile_until_done(services.reconcile_cluster, cluster.pk)
    reconcile_until_done(services.reconcile_node_pool, gpu_pool.pk)

    gpu_pool.refresh_from_db()
    assert gpu_pool.status == NodePool.Status.RUNNING
    zones = {node.labels["topology.kubernetes.io/zone"] for node in gpu_pool.nodes.all()}
    assert (gpu_pool.nodes.count(), zones) == (3, {"us-central1-c"})
    (call,) = fake_gke.requests("POST", "/nodePools")
    assert call.body["nodePool"]["locations"] == ["us-central1-c"]


def test_a_crash_before_the_pool_operation_is_saved_does_not_create_a_second_pool(
    cluster, gpu_pool, fake_gke, monkeypatch
):
    reconcile_until_done(services.reconcile_cluster, cluster.pk)
    monkeypatch.setattr(GkeProvider, "create_node_pool", crash_after(GkeProvider.create_node_pool))
    with pytest.raises(WorkerCrashed):
        services.reconcile_node_pool(gpu_pool.pk)
    monkeypatch.undo()

    reconcile_until_done(services.reconcile_node_pool, gpu_pool.pk)

    gpu_pool.refresh_from_db()
    assert gpu_pool.operation_id == f"{CLUSTER_PATH}/nodePools/gpupool"
    assert (gpu_pool.status, gpu_pool.nodes.count()) == (NodePool.Status.RUNNING, 3)
    assert len(fake_gke.requests("POST", "/nodePools", status=200)) == 1


def test_a_quota_error_fails_the_pool_with_a_message_and_an_event(cluster, gpu_pool, fake_gke):
    reconcile_until_done(services.reconcile_cluster, cluster.pk)
    fake_gke.fail_next("RESOURCE_EXHAUSTED")

    progress = services.reconcile_node_pool(gpu_pool.pk)

    assert progress.done
    gpu_pool.refresh_from_db()
    assert gpu_pool.status == NodePool.Status.ERROR
    assert "node pool gpupool of cluster llm-cluster: quota exceeded" in gpu_pool.status_message
    failed = Event.objects.get(kind="node_pool.failed")
    assert (failed.object_key, failed.message) == (
        "NodePool/llm-cluster/gpupool",
        gpu_pool.status_message,
    )


def test_an_unavailable_api_is_retried_and_said_on_the_cluster(cluster, fake_gke):
    fake_gke.fail_next("UNAVAILABLE")

    progress = services.reconcile_cluster(cluster.pk)

    assert (progress.done, progress.retry_after) == (False, services.RETRY_SECONDS)
    cluster.refresh_from_db()
    assert cluster.status == Cluster.Status.PROVISIONING
    assert cluster.status_message.startswith("retrying: cluster llm-cluster:")
    reconcile_until_done(services.reconcile_cluster, cluster.pk)
    cluster.refresh_from_db()
    assert (cluster.status, cluster.status_message) == (Cluster.Status.RUNNING, "")


def test_a_failed_cluster_operation_fails_the_cluster_and_its_pools(cluster, gpu_pool, fake_gke):
    fake_gke.fail_next_operation("GCE_QUOTA_EXCEEDED: not enough CPUS in us-central1")

    reconcile_until_done(services.reconcile_cluster, cluster.pk)
    reconcile_until_done(services.reconcile_node_pool, gpu_pool.pk)

    cluster.refresh_from_db()
    gpu_pool.refresh_from_db()
    assert cluster.status == gpu_pool.status == "ERROR"
    assert cluster.status_message == (
        "cluster llm-cluster: GCE_QUOTA_EXCEEDED: not enough CPUS in us-central1"
    )
    assert gpu_pool.status_message == "node pool gpupool: cluster llm-cluster failed"
    assert Event.objects.filter(kind__in=["cluster.failed", "node_pool.failed"]).count() == 2


def running(cluster, pool):
    reconcile_until_done(services.reconcile_cluster, cluster.pk)
    reconcile_until_done(services.reconcile_node_pool, pool.pk)
    pool.refresh_from_db()
    return pool


def test_a_pool_is_resized_through_set_size_then_deleted_once(
    cluster, gpu_pool, fake_gke, django_capture_on_commit_callbacks
):
    pool = running(cluster, gpu_pool)
    with django_capture_on_commit_callbacks(execute=False):
        services.resize_node_pool(pool, 5)
    reconcile_until_done(services.reconcile_node_pool, pool.pk)
    reconcile_until_done(services.reconcile_node_pool, pool.pk)  # a retried task: no-op

    pool.refresh_from_db()
    assert (pool.status, pool.nodes.count()) == (NodePool.Status.RUNNING, 5)
    (resize,) = fake_gke.requests("POST", "/nodePools/gpupool:setSize")
    assert resize.body["nodeCount"] == 5

    with django_capture_on_commit_callbacks(execute=False):
        services.delete_node_pool(pool)
    reconcile_until_done(services.reconcile_node_pool, pool.pk)

    assert not NodePool.objects.filter(pk=pool.pk).exists()
    assert len(fake_gke.requests("DELETE", "/nodePools/gpupool")) == 1
    assert list(
        Event.objects.filter(kind__startswith="node_pool.").values_list("kind", flat=True)
    ) == [
        "node_pool.creating",
        "node_pool.created",
        "node_pool.resizing",
        "node_pool.resized",
        "node_pool.deleting",
        "node_pool.deleted",
    ]


def test_a_cluster_is_deleted_once_through_the_gke_api(
    cluster, gpu_pool, fake_gke, django_capture_on_commit_callbacks
):
    running(cluster, gpu_pool)
    with django_capture_on_commit_callbacks(execute=False):
        services.delete_cluster(Cluster.objects.get(pk=cluster.pk))

    reconcile_until_done(services.reconcile_cluster, cluster.pk)

    assert not Cluster.objects.filter(pk=cluster.pk).exists()
    (deleted,) = fake_gke.requests("DELETE", "/clusters/llm-cluster")
    assert deleted.status == 200
    assert Event.objects.filter(kind="cluster.deleted", object_key="Cluster/llm-cluster").exists()
