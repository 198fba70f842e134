"""Node pools through `clusters.services`: catalog checks, the sim provider, idempotent tasks."""

from __future__ import annotations

import pytest
from django.utils import timezone

from clusters import catalog, services
from clusters.catalog import CatalogError
from clusters.models import Cluster, NodePool
from events.models import Event
from tests.support import row_counts


@pytest.fixture
def empty_cluster(db):
    return Cluster.objects.create(name="llm-cluster", status=Cluster.Status.RUNNING)


@pytest.fixture
def instant_operations(settings):
    """Tasks run in-process when enqueued, and sim operations finish at once."""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.ACCELPLANE_SIM_OPERATION_SECONDS = 0


def create_gpu_pool(cluster, nodes=2):
    return services.create_node_pool(
        cluster, name="gpupool", machine_type="g2-standard-24", node_count=nodes
    )


@pytest.mark.usefixtures("instant_operations")
def test_a_created_node_pool_ends_running_with_nodes_labelled_as_gke_does(
    empty_cluster, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        pool = create_gpu_pool(empty_cluster, nodes=2)

    pool.refresh_from_db()
    assert pool.status == NodePool.Status.RUNNING
    nodes = list(pool.nodes.all())
    assert len(nodes) == 2
    for node in nodes:
        assert node.labels[catalog.LABEL_NODEPOOL] == "gpupool"
        assert node.labels[catalog.LABEL_ACCELERATOR] == "nvidia-l4"
        assert node.labels["node.kubernetes.io/instance-type"] == "g2-standard-24"
        assert node.labels[catalog.LABEL_HOSTNAME] == node.name
        assert node.allocatable[catalog.GPU_RESOURCE] == 2000
    created = Event.objects.get(kind="node_pool.created")
    assert created.object_key == "NodePool/llm-cluster/gpupool"
    assert created.data["nodes"] == 2


@pytest.mark.usefixtures("instant_operations")
def test_an_invalid_pool_is_rejected_naming_nodes_and_stores_nothing(
    empty_cluster, django_capture_on_commit_callbacks
):
    before = row_counts()

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(CatalogError) as caught:
        services.create_node_pool(
            empty_cluster,
            name="tpu7-pool",
            machine_type="tpu7x-standard-4t",
            node_count=15,
            tpu_topology="4x4x4",
        )

    assert caught.value.field == "nodes"
    assert str(caught.value).startswith("nodes: 15")
    assert row_counts() == before


@pytest.mark.usefixtures("instant_operations")
def test_reconciling_a_pool_twice_creates_its_nodes_once(
    empty_cluster, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        pool = create_gpu_pool(empty_cluster, nodes=3)

    first = services.reconcile_node_pool(pool.pk)
    second = services.reconcile_node_pool(pool.pk)

    assert (first.done, second.done) == (True, True)
    assert pool.nodes.count() == 3
    assert Event.objects.filter(kind="node_pool.created").count() == 1


def test_a_retried_reconcile_resumes_the_stored_operation(
    empty_cluster, settings, django_capture_on_commit_callbacks
):
    settings.ACCELPLANE_SIM_OPERATION_SECONDS = 60
    with django_capture_on_commit_callbacks(execute=False):
        pool = create_gpu_pool(empty_cluster)

    first = services.reconcile_node_pool(pool.pk)
    operation = NodePool.objects.get(pk=pool.pk).operation_id
    second = services.reconcile_node_pool(pool.pk)

    assert (first.done, second.done) == (False, False)
    assert operation
    pool.refresh_from_db()
    assert (pool.status, pool.operation_id) == (NodePool.Status.PROVISIONING, operation)
    assert not pool.nodes.exists()


@pytest.fixture
def running_pool(empty_cluster, instant_operations, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        pool = create_gpu_pool(empty_cluster, nodes=2)
    pool.refresh_from_db()
    return pool


def node_names(pool):
    return sorted(pool.nodes.values_list("name", flat=True))


def test_a_pool_grows_and_shrinks_and_the_pods_of_removed_nodes_are_rescheduled(
    running_pool, django_capture_on_commit_callbacks
):
    from workloads.models import KubeObject, Pod

    first, second = node_names(running_pool)
    with django_capture_on_commit_callbacks(execute=True):
        grown = services.resize_node_pool(running_pool, 3)
    grown.refresh_from_db()
    assert grown.status == NodePool.Status.RUNNING
    assert len(node_names(grown)) == 3
    assert {first, second} <= set(node_names(grown))
    owner = KubeObject.objects.create(
        cluster=running_pool.cluster,
        api_version="v1",
        kind="Pod",
        namespace="llm",
        name="server",
        manifest={},
        created_at=timezone.now(),
        updated_at=timezone.now(),
    )
    third = (set(node_names(grown)) - {first, second}).pop()
    pod = Pod.objects.create(
        cluster=running_pool.cluster,
        owner=owner,
        name="server",
        namespace="llm",
        phase=Pod.Phase.RUNNING,
        ready=True,
        created_at=timezone.now(),
        node=grown.nodes.get(name=third),
        bound_at=timezone.now(),
    )

    with django_capture_on_commit_callbacks(execute=True):
        services.resize_node_pool(grown, 2)

    grown.refresh_from_db()
    assert (grown.status, grown.node_count, node_names(grown)) == ("RUNNING", 2, [first, second])
    pod.refresh_from_db()
    assert (pod.node, pod.phase, pod.ready) == (None, "Pending", False)
    assert list(
        Event.objects.filter(kind__startswith="node_pool.res").values_list("kind", "data__nodes")
    ) == [
        ("node_pool.resizing", None),
        ("node_pool.resized", 3),
        ("node_pool.resizing", None),
        ("node_pool.resized", 2),
    ]


def test_a_deleted_pool_goes_with_its_nodes(running_pool, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.delete_node_pool(running_pool)

    assert not NodePool.objects.filter(pk=running_pool.pk).exists()
    assert not running_pool.cluster.nodes.exists()
    assert Event.objects.filter(kind="node_pool.deleted").get().data["nodes"] == 0


def test_a_size_the_catalog_refuses_changes_nothing(running_pool):
    with pytest.raises(CatalogError, match="nodes"):
        services.resize_node_pool(running_pool, catalog.MAX_NODES + 1)

    running_pool.refresh_from_db()
    assert (running_pool.status, running_pool.node_count) == ("RUNNING", 2)


def test_a_pool_in_the_middle_of_an_operation_takes_no_other(
    running_pool, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):  # the resize is still running
        services.resize_node_pool(running_pool, 3)

    with pytest.raises(services.Busy, match="node pool gpupool is RESIZING"):
        services.delete_node_pool(running_pool)
    assert services.provisioning_node_pool_ids() == [running_pool.pk]  # beat resumes it


def test_a_deleted_cluster_goes_at_the_provider_then_here(
    running_pool, django_capture_on_commit_callbacks
):
    cluster = running_pool.cluster
    with django_capture_on_commit_callbacks(execute=False):  # the worker comes later
        deleting = services.delete_cluster(cluster)
    assert deleting.status == Cluster.Status.DELETING
    with pytest.raises(services.Busy, match="cluster llm-cluster is DELETING"):
        services.delete_cluster(cluster)
    assert services.provisioning_cluster_ids() == [cluster.pk]  # beat resumes it

    assert services.reconcile_cluster(cluster.pk).done
    assert services.reconcile_cluster(cluster.pk).done  # a retried task: nothing more

    assert not Cluster.objects.filter(pk=cluster.pk).exists()
    assert not NodePool.objects.exists()
    kinds = Event.objects.filter(kind__startswith="cluster.").values_list("kind", flat=True)
    assert list(kinds) == ["cluster.deleting", "cluster.deleted"]
