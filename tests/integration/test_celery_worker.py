"""Node pools provisioned by a real Celery worker over Redis, surviving a killed worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from clusters import services
from clusters.models import Cluster, NodePool
from events.models import Event

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
NODES = 3
PROVISIONED_WITHIN = 30.0  # seconds: worker start-up plus a 1 s simulated operation
RESUMED_WITHIN = 20.0  # seconds: a new worker's start-up plus what is left of the operation


def worker_database_url():
    """DATABASE_URL naming the database this test runs in (pytest-django's test_<NAME>)."""
    url = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))


@pytest.fixture
def start_worker(transactional_db, tmp_path):
    """Start Celery workers on the test database; all are stopped before the database is reset."""
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "ACCELPLANE_SIM_OPERATION_SECONDS": "1",
        "CELERY_TASK_ALWAYS_EAGER": "0",
    }
    workers = []

    def start():
        log = (tmp_path / f"worker-{len(workers)}.log").open("w")
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "controlplane",
                "worker",
                "--pool=solo",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=INFO",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        workers.append((worker, log))
        return worker

    yield start
    for worker, log in workers:
        if worker.poll() is None:
            worker.terminate()
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        log.close()


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail(f"{what} within {timeout:.0f} s")


def pool_is_running(pool):
    return NodePool.objects.filter(pk=pool.pk, status=NodePool.Status.RUNNING).exists()


@pytest.fixture
def cluster(transactional_db):
    return Cluster.objects.create(name="llm-cluster", status=Cluster.Status.RUNNING)


def create_gpu_pool(cluster):
    # Committed at once (no test transaction), so on_commit enqueues the task on Redis.
    return services.create_node_pool(
        cluster, name="gpupool", machine_type="g2-standard-24", node_count=NODES
    )


def test_a_worker_provisions_a_node_pool_enqueued_on_redis(cluster, start_worker):
    start_worker()

    pool = create_gpu_pool(cluster)

    wait_for(lambda: pool_is_running(pool), PROVISIONED_WITHIN, "node pool RUNNING")
    assert pool.nodes.count() == NODES


def test_a_pool_whose_worker_was_killed_mid_operation_is_finished_by_the_next_worker(
    cluster, start_worker
):
    first = start_worker()
    pool = create_gpu_pool(cluster)
    wait_for(
        lambda: NodePool.objects.filter(
            pk=pool.pk, status=NodePool.Status.PROVISIONING, operation_id__gt=""
        ).exists(),
        PROVISIONED_WITHIN,
        "operation id stored",
    )
    # The operation is in flight: its id is stored and the task waits to poll it again.

    first.send_signal(signal.SIGKILL)
    first.wait()
    start_worker()

    wait_for(lambda: pool_is_running(pool), RESUMED_WITHIN, "node pool RUNNING after a new worker")
    assert pool.nodes.count() == NODES
    assert Event.objects.filter(kind="node_pool.created").count() == 1
