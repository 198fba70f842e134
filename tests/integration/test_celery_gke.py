"""The gke provider's tasks in real Celery workers over Redis, against the fake GKE API: a
worker killed while GKE is still creating the cluster is replaced, and the cluster is created
once, with its Kubernetes endpoint stored."""

from __future__ import annotations

import signal

import pytest

from clusters import services
from clusters.models import Cluster, NodePool
from events.models import Event
from tests.contract.fake_gke import FakeGke
from tests.integration.workers import wait_for, with_beat

pytestmark = pytest.mark.django_db(transaction=True)

STARTED_WITHIN = 30.0  # seconds: a worker's start-up and the create request
# A new worker's start-up plus the broker's redelivery of the killed worker's task (a 5 s
# visibility timeout, restores every 2 s), or beat's resume_provisioning after 15 s.
RESUMED_WITHIN = 45.0


@pytest.fixture
def fake_gke():
    with FakeGke(polls_to_finish=10_000) as fake:  # "still creating" until the test says
        yield fake


def test_a_worker_killed_while_gke_creates_the_cluster_never_creates_a_second_one(
    fake_gke, start_worker
):
    first = start_worker(ACCELPLANE_GKE_ENDPOINT=fake_gke.url)
    # Committed at once (no test transaction), so on_commit enqueues the tasks on Redis.
    cluster = services.create_cluster(
        name="llm-cluster", provider="gke", project="acme-ml", location="us-central1"
    )
    pool = services.create_node_pool(
        cluster, name="gpupool", machine_type="g2-standard-24", node_count=2, zone="us-central1-c"
    )
    wait_for(
        lambda: Cluster.objects.filter(pk=cluster.pk, operation_id__gt="").exists(),
        STARTED_WITHIN,
        "the create operation's id stored",
    )

    first.send_signal(signal.SIGKILL)
    first.wait()
    for operation in fake_gke.operations.values():
        operation.polls_left = 2  # GKE finishes soon after
    fake_gke.polls_to_finish = 2
    start_worker(ACCELPLANE_GKE_ENDPOINT=fake_gke.url)

    # Production runs beat beside the workers: a task the killed worker had taken off the
    # queue but not yet marked unacknowledged is lost with it (kombu's Redis transport), and
    # resume_provisioning is what drives such a cluster on.
    wait_for(
        with_beat(
            lambda: NodePool.objects.filter(pk=pool.pk, status=NodePool.Status.RUNNING).exists(),
            "resume-provisioning",
        ),
        RESUMED_WITHIN,
        "cluster and node pool RUNNING after a new worker",
        start_worker.log_tails,
    )
    cluster.refresh_from_db()
    assert cluster.status == Cluster.Status.RUNNING
    assert cluster.endpoint == "10.0.0.2"
    assert len(fake_gke.requests("POST", "/clusters")) == 1
    assert len(fake_gke.requests("POST", "/nodePools")) == 1
    assert Event.objects.filter(kind="cluster.created").count() == 1
    assert pool.nodes.count() == 2
