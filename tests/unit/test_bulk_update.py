"""`bulk.update_rows` and `bulk.insert_rows`: each row gets its own values (JSON, NULL,
timestamps, text), in chunks, on SQLite and on PostgreSQL (DATABASE_URL)."""

from __future__ import annotations

import pytest

from controlplane import bulk
from tests.support import NAMESPACE, at, deployment
from workloads import services
from workloads.models import Pod, Workload

REPLICAS = 5


@pytest.fixture
def workloads(gpu_queues):
    text = deployment(replicas=REPLICAS)
    services.apply(
        gpu_queues, text, source="d.yaml", now=at(), namespace=NAMESPACE, admit=services.Admit.SKIP
    )
    return list(Workload.objects.order_by("pk"))


def test_each_row_gets_its_own_values_and_other_rows_keep_theirs(workloads):
    changed, untouched = workloads[:-1], workloads[-1]
    fields = ["admission", "quota_reserved_at", "pending_message", "admissions", "parked"]
    rows = [
        (
            row.pk,
            {"cluster_queue": "gpu-queue", "pod_sets": [{"name": "main", "count": index}]},
            at(minutes=index) if index % 2 else None,  # NULL in the first row
            f"it's {index}'s \"message\"",
            index,
            bool(index % 2),
        )
        for index, row in enumerate(changed)
    ]

    assert bulk.update_rows(Workload, "pk", fields, rows) == len(changed)

    stored = {row.pk: row for row in Workload.objects.all()}
    for pk, *values in rows:
        assert [getattr(stored[pk], f) for f in fields] == values
    assert stored[untouched.pk].admission is None
    assert stored[untouched.pk].pending_message == untouched.pending_message


def test_a_foreign_key_can_be_the_key(workloads):
    rows = [(row.pk, Pod.Phase.PENDING, {"requests": {"cpu": row.pk}}) for row in workloads]

    bulk.update_rows(Pod, "workload", ["phase", "scheduling"], rows)

    pods = Pod.objects.order_by("workload_id")
    assert [(p.workload_id, p.phase, p.scheduling) for p in pods] == rows


def test_rows_are_written_in_statements_of_bounded_size(
    workloads, monkeypatch, django_assert_num_queries
):
    monkeypatch.setattr(bulk, "MAX_ROWS_PER_STATEMENT", 2)
    rows = [(row.pk, f"message {row.pk}") for row in workloads]

    with django_assert_num_queries(3):  # 5 rows, 2 a statement
        assert bulk.update_rows(Workload, "pk", ["pending_message"], rows) == REPLICAS

    assert sorted(Workload.objects.values_list("pk", "pending_message")) == rows


def test_inserted_rows_have_their_values_and_the_defaults_of_the_rest(workloads):
    owner = workloads[0].owner
    fields = ["cluster", "owner", "workload", "name", "phase", "scheduling", "created_at"]
    rows = [
        (owner.cluster_id, owner.pk, row.pk, f"pod-{i}", Pod.Phase.PENDING, {"n": i}, at(i))
        for i, row in enumerate(workloads)
    ]

    assert bulk.insert_rows(Pod, fields, rows) == REPLICAS

    pods = Pod.objects.filter(name__startswith="pod-").order_by("name")
    attributes = [Pod._meta.get_field(f).attname for f in fields]
    assert [tuple(getattr(p, a) for a in attributes) for p in pods] == rows
    assert all(p.pod_set == "main" and p.node_id is None and not p.ready for p in pods)


def test_inserted_rows_return_their_primary_keys_in_order_across_statements(
    workloads, monkeypatch, django_assert_num_queries
):
    monkeypatch.setattr(bulk, "MAX_ROWS_PER_STATEMENT", 2)
    owner = workloads[0].owner
    fields = ["cluster", "owner", "workload", "name", "phase", "created_at"]
    rows = [
        (owner.cluster_id, owner.pk, row.pk, f"pod-{i}", Pod.Phase.PENDING, at(i))
        for i, row in enumerate(workloads)
    ]

    with django_assert_num_queries(3):  # 5 rows, 2 a statement
        pks = bulk.insert_rows_returning_pks(Pod, fields, rows)

    assert [Pod.objects.get(pk=pk).name for pk in pks] == [f"pod-{i}" for i in range(REPLICAS)]
