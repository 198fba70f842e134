"""The watches of one cluster ingest at once, each in its own transaction: the Workloads'
watch must not take the locks the Pods' watch holds, or PostgreSQL ends one of them as a
deadlock (the watch of Workloads then stopped until its lease expired)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from tests.contract.conftest import gpu_cluster_on
from tests.contract.fake_kube import FakeKube
from tests.contract.test_kube_watch import admitted_finetune
from tests.support import at
from workloads.kube import ingest, mirror
from workloads.models import Pod, Workload

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_workloads_ingest_waits_on_no_lock_the_pods_watch_holds(settings):
    settings.ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS = True  # the fake serves plain http
    with FakeKube() as fake:
        cluster = gpu_cluster_on(fake)
    finetune = Workload.objects.get(cluster=cluster, owner__name="finetune")
    holding, done = threading.Event(), threading.Event()

    def pods_watch() -> None:
        # What mirror.ingest_pod holds: the cluster's row, and a new pod pointing at the
        # workload (a key-share lock on the workload's row).
        try:
            with transaction.atomic():
                mirror.serialized(cluster)
                Pod.objects.create(
                    cluster=cluster,
                    owner=finetune.owner,
                    workload=finetune,
                    name="finetune-0-x7k2p",
                    namespace=finetune.namespace,
                    phase=Pod.Phase.RUNNING,
                    created_at=at(),
                )
                holding.set()
                done.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=pods_watch)
    thread.start()
    assert holding.wait(30)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '3s'")  # a wait ends the test, not a hang
        ingest.ingest(cluster, admitted_finetune(), at())
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")
        done.set()
        thread.join()
    finetune.refresh_from_db()
    assert finetune.phase == Workload.Phase.ADMITTED
