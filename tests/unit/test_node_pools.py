"""Node pools through `clusters.services`: catalog checks, the sim provider, idempotent tasks."""

from __future__ import annotations

import pytest

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
