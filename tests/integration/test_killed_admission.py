"""A worker killed (SIGKILL) in the middle of an admission cycle: its decisions, written but not
committed, vanish with it, the admission lock is free at once, and the next cycle admits
within quota with an event log that has no hole in what was committed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from django.db import connection, transaction

from events.models import Event
from tests.integration.workers import ROOT, worker_database_url
from tests.support import NAMESPACE, at, job
from workloads import admission, services
from workloads.models import Workload

pytestmark = pytest.mark.django_db(transaction=True)

HELD_WITHIN = 30  # seconds for the other process to start Django and reach the pause

# The admission service's own steps (admit_pending), paused before the commit: every decision
# and event of the cycle is written, the admission and event-log locks are held.
ADMIT_AND_HANG = """
import sys
from django.db import transaction
from django.utils import timezone
from clusters.models import Cluster
from workloads import admission
from workloads.snapshot import load
import scheduler
cluster = Cluster.objects.get(name="llm-cluster")
with transaction.atomic():
    admission.lock_admission(cluster)
    snap = load(cluster)
    decisions = scheduler.schedule(snap.snapshot)
    admission._Writer(cluster, snap, timezone.now()).write(decisions, [])
    print("ADMITTED", len(decisions.admitted), flush=True)
    sys.stdin.readline()  # killed here, before the commit
"""


@pytest.fixture
def queued(gpu_queues):
    """Four single-pod Jobs of 2 GPUs each against a 6-GPU ClusterQueue: three can be admitted."""
    for i in range(4):
        services.apply(
            gpu_queues,
            job(f"train-{i}", pods=1),
            source="job.yaml",
            now=at(seconds=i),
            namespace=NAMESPACE,
            admit=services.Admit.SKIP,
        )
    return gpu_queues


def lock_is_free(cluster) -> bool:
    """Whether another session could take the cluster's admission lock right now."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '2s'")
        try:
            admission.lock_admission(cluster)
        except Exception:  # psycopg's LockNotAvailable, wrapped by Django
            return False
    return True


def test_a_worker_killed_mid_admission_leaves_nothing_behind_and_frees_the_lock(queued):
    seqs_before = list(Event.objects.values_list("id", flat=True))
    env = {**os.environ, "DATABASE_URL": worker_database_url()}
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", ADMIT_AND_HANG],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = worker.stdout.readline()
        assert line.startswith("ADMITTED 3"), line
        # While it holds the lock, nobody else may admit on this cluster.
        assert not lock_is_free(queued)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=HELD_WITHIN)

    # Nothing of its transaction is visible...
    assert not Workload.objects.exclude(phase=Workload.Phase.PENDING).exists()
    assert list(Event.objects.values_list("id", flat=True)) == seqs_before
    # ...and PostgreSQL released its locks with its connection.
    assert lock_is_free(queued)

    decisions = admission.admit_pending(queued, at(minutes=1))

    assert len(decisions.admitted) == 3
    admitted = Workload.objects.filter(phase=Workload.Phase.ADMITTED)
    assert sorted(w.owner.name for w in admitted) == ["train-0", "train-1", "train-2"]
    events = list(Event.objects.order_by("id").values_list("seq", "kind"))
    # Numbered in commit order, and the killed cycle took no numbers: no gap.
    seqs = [seq for seq, _ in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert [kind for _, kind in events].count("workload.admitted") == 3
