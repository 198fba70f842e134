"""The watcher (a thread-pool worker of the `watch` queue, as `make stack` and Compose run it)
over Redis: beat's leases start a watch of each resource of a real cluster, and what the fake
apiserver holds comes back as rows and events while the admitting workers stay free."""

from __future__ import annotations

import time

import pytest

from clusters.models import Node, NodePool
from events.models import Event
from tests.contract.conftest import gpu_cluster_on
from tests.contract.fake_kube import FakeKube
from tests.contract.test_kube_mirror import node, trainer
from tests.contract.test_kube_watch import admitted_finetune
from tests.integration.workers import wait_for
from workloads import tasks
from workloads.kube import watch
from workloads.models import KubeWatch, Pod, Workload

pytestmark = pytest.mark.django_db(transaction=True)

WATCHED_WITHIN = 60.0  # seconds: the watcher's start-up and its sessions of twelve watches


@pytest.fixture
def fake_kube(settings):
    settings.ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS = True  # it serves plain http on loopback
    with FakeKube() as fake:
        yield fake


def test_beat_starts_every_watch_of_a_cluster_on_the_watcher(fake_kube, start_worker):
    start_worker(
        "--queues=watch",
        "--pool=threads",  # sized by workloads.tasks.size_the_watcher: a thread a watch
        ACCELPLANE_WATCH_SESSION_SECONDS="2",
        ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS="1",
    )
    cluster = gpu_cluster_on(fake_kube)
    NodePool.objects.create(
        cluster=cluster, name="gpu-pool", machine_type="g2-standard-24", node_count=1
    )
    fake_kube.put(node("gpu-node-0"))
    fake_kube.put(trainer(0, node_name="gpu-node-0"))
    fake_kube.put(admitted_finetune())

    beats = [time.monotonic()]
    tasks.watch_clusters()  # beat

    def ingested() -> bool:
        # Beat runs every few seconds in production, restarting any session that ended.
        if time.monotonic() - beats[-1] > 2:
            beats.append(time.monotonic())
            tasks.watch_clusters()
        return (
            Workload.objects.filter(owner__name="finetune", phase="Admitted").exists()
            and Pod.objects.filter(name="finetune-0-x7k2p", node__name="gpu-node-0").exists()
        )

    wait_for(
        ingested,
        WATCHED_WITHIN,
        "the Kueue Workload, the Node and the Pod ingested by the watcher",
        start_worker.log_tails,
    )
    assert Node.objects.filter(cluster=cluster).count() == 1
    assert Event.objects.filter(kind="workload.admitted").count() == 1
    leased = KubeWatch.objects.filter(cluster=cluster, leased_until__isnull=False)
    # Every watched resource, Kueue's objects and Jobs included, has a session on the watcher.
    assert sorted(leased.values_list("resource", flat=True)) == sorted(watch.WATCHED)
