"""A `Prepared` query gives what its queryset gives, however its parameters change, on SQLite
and on PostgreSQL (DATABASE_URL), and the ORM builds it once."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.db.models import TextField
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from controlplane.prepared import Keys, Param, Prepared
from tests.support import NAMESPACE, at, deployment
from workloads import services
from workloads.models import Pod, Workload

REPLICAS = 4
QUEUED_AT = Workload._meta.get_field("queued_at")


@pytest.fixture
def workloads(gpu_queues):
    """Deployments' workloads queued a minute apart, each with its gated pod."""
    for minute in range(REPLICAS):
        services.apply(
            gpu_queues,
            deployment(name=f"web-{minute}", replicas=1),
            source="d.yaml",
            now=at(minutes=minute),
            namespace=NAMESPACE,
            admit=services.Admit.SKIP,
        )
    return list(Workload.objects.order_by("pk"))


def _queued_before(cluster_id, before):
    return (
        Workload.objects.filter(cluster_id=cluster_id, queued_at__lt=before)
        .order_by("pk")
        .values_list("pk", "queued_at", "owner__name", "pod_sets")
    )


QUEUED_BEFORE = Prepared(lambda: _queued_before(Param("cluster"), Param("before", QUEUED_AT)))


@pytest.mark.parametrize("minutes", [0, 1, 2, 5])
def test_rows_are_the_querysets_with_the_parameters_bound(workloads, minutes):
    cluster = workloads[0].cluster_id
    before = at(minutes=minutes) + timedelta(seconds=1)

    rows = QUEUED_BEFORE.rows(cluster=cluster, before=before)

    assert rows == list(_queued_before(cluster, before))
    assert len(rows) == min(minutes + 1, REPLICAS)
    # Converted as the ORM converts them: aware datetimes, decoded JSON.
    for _, queued_at, _, pod_sets in rows:
        assert queued_at.tzinfo is not None
        assert isinstance(pod_sets, list)


def _pods_of(workload_ids):
    return (
        Pod.objects.filter(workload_id__in=workload_ids)
        .order_by("pk")
        .values_list("workload_id", Cast("scheduling", TextField()), KT("scheduling__requests"))
    )


PODS_OF = Prepared(lambda: _pods_of(Keys("workloads")))
WORKLOAD_IDS = Prepared(
    lambda: Workload.objects.filter(pk__in=Keys("pks")).order_by("pk").values_list("pk", flat=True)
)


@pytest.mark.parametrize("count", [0, 1, REPLICAS])
def test_keys_select_the_rows_of_their_keys(workloads, count):
    pks = [row.pk for row in workloads[:count]]

    assert PODS_OF.rows(workloads=pks) == list(_pods_of(pks))
    assert len(PODS_OF.rows(workloads=pks)) == count
    assert WORKLOAD_IDS.rows(pks=set(pks)) == pks


def test_the_orm_builds_the_statement_once(workloads):
    built = []

    def build():
        built.append(1)
        return Workload.objects.filter(pk__in=Keys("pks")).values_list("name", flat=True)

    names = Prepared(build)
    first, rest = [workloads[0].pk], [row.pk for row in workloads[1:]]

    assert names.rows(pks=first) == [workloads[0].name]
    assert sorted(names.rows(pks=rest)) == sorted(row.name for row in workloads[1:])
    assert len(built) == 1


def test_only_value_lists_can_be_prepared(workloads):
    with pytest.raises(TypeError, match="values_list"):
        Prepared(lambda: Workload.objects.filter(pk=Param("pk"))).rows(pk=workloads[0].pk)


@pytest.mark.django_db(transaction=True)
def test_each_thread_runs_it_on_its_own_connection_compiled_once(workloads):
    built = []

    def build():
        built.append(1)
        return _queued_before(Param("cluster"), Param("before", QUEUED_AT))

    queued_before = Prepared(build)
    cluster, before = workloads[0].cluster_id, at(minutes=REPLICAS)
    found = {}

    def other_thread():
        found["rows"] = queued_before.rows(cluster=cluster, before=before)
        connections.close_all()

    here = queued_before.rows(cluster=cluster, before=before)
    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()

    assert found["rows"] == here == list(_queued_before(cluster, before))
    assert len(built) == 1  # compiled once, converting with each thread's connection


def test_text_keys_select_the_rows_named(workloads):
    names = Prepared(
        lambda: (
            Workload.objects.filter(name__in=Keys("names", text=True))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
    )

    assert names.rows(names=[workloads[1].name, "nothing"]) == [workloads[1].pk]
