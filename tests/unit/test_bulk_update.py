"""`bulk.update_rows` and `bulk.insert_rows`: each row gets its own values (JSON, NULL,
timestamps, text), in chunks, on SQLite and on PostgreSQL (DATABASE_URL). On PostgreSQL many
rows go by COPY, fewer by `unnest`ed arrays: both store the same values (text COPY escapes,
JSON, NULLs, timestamps) as SQLite's VALUES."""

from __future__ import annotations

import json
from datetime import timedelta, timezone

import pytest
from django.db import connection

from controlplane import bulk
from tests.support import NAMESPACE, at, deployment
from workloads import services
from workloads.models import Pod, Workload, WorkloadChange

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
    fields = ["admission", "quota_reserved_at", "pending_message", "admissions", "preempting"]
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


def test_created_instances_get_their_keys_and_read_back_as_bulk_create_stores_them(workloads):
    owner = workloads[0].owner

    def pods(prefix):
        return [
            Pod(
                cluster_id=owner.cluster_id,
                owner=owner,
                workload=row,
                name=f"{prefix}-{i}",
                namespace=NAMESPACE,
                scheduling={"requests": {"cpu": 1000 * i}, "node_selector": {"pool": "a"}},
                created_at=at(i),
            )
            for i, row in enumerate(workloads)
        ]

    made, expected = pods("made"), pods("expected")
    Pod.objects.bulk_create(expected)

    bulk.create(made)

    assert all(not p._state.adding for p in made)
    assert len({p.pk for p in made} - {None}) == REPLICAS
    stored = Pod.objects.in_bulk([p.pk for p in made + expected])
    assert [stored[p.pk].name for p in made] == [f"made-{i}" for i in range(REPLICAS)]
    fields = [f.attname for f in Pod._meta.concrete_fields if f.attname not in ("id", "name")]
    assert [[getattr(stored[p.pk], f) for f in fields] for p in made] == [
        [getattr(stored[p.pk], f) for f in fields] for p in expected
    ]


# COPY's text format escapes backslashes, tabs, newlines, carriage returns and spells NULL \N.
TEXTS = ["tab\there", "line\nbreak\r", "back\\slash \\N", "NULL", "", 'it\'s "quoted" {a,b}']
JSONS = [
    {"s": 'tab\t \\N "q" \u00e9 \U0001f680', "n": None, "l": [1, 2.5, True, None, "NULL"]},
    "NULL",  # a JSON string
    [],
    {},
    None,  # SQL NULL
]
TIMES = [
    at() + timedelta(microseconds=123456),
    at().astimezone(timezone(timedelta(hours=5, minutes=30))),
    None,
]


@pytest.fixture(params=["copy", "statement"])
def path(request, monkeypatch):
    """COPY for any number of rows, or never."""
    monkeypatch.setattr(bulk, "COPY_MIN_ROWS", 1 if request.param == "copy" else 10**9)
    return request.param


def test_updated_rows_read_back_as_written(workloads, path):
    fields = [
        "admission",
        "quota_reserved_at",
        "pending_message",
        "pending_reason",
        "preempting",
        "resumed_from_step",
    ]
    rows = [
        (
            row.pk,
            JSONS[index % len(JSONS)],
            TIMES[index % len(TIMES)],
            TEXTS[index % len(TEXTS)],
            TEXTS[(index + 1) % len(TEXTS)],
            bool(index % 2),
            index if index % 2 else None,
        )
        for index, row in enumerate(workloads)
    ]

    assert bulk.update_rows(Workload, "pk", fields, rows) == REPLICAS

    stored = {row.pk: row for row in Workload.objects.all()}
    for pk, *values in rows:
        assert [getattr(stored[pk], f) for f in fields] == values


def test_inserted_rows_read_back_as_written(workloads, path):
    owner = workloads[0].owner
    fields = ["cluster", "owner", "workload", "name", "phase", "scheduling", "created_at"]
    rows = [
        (
            owner.cluster_id,
            owner.pk,
            row.pk if index % 2 else None,
            f"pod-{index} {TEXTS[index % len(TEXTS)]}",
            Pod.Phase.PENDING,
            JSONS[index % len(JSONS)] or {"n": index},
            TIMES[index % 2],
        )
        for index, row in enumerate(workloads)
    ]

    assert bulk.insert_rows(Pod, fields, rows) == REPLICAS

    pods = Pod.objects.filter(name__startswith="pod-").order_by("name")
    attributes = [Pod._meta.get_field(f).attname for f in fields]
    assert [tuple(getattr(p, a) for a in attributes) for p in pods] == rows
    assert all(p.pod_set == "main" and p.node_id is None and not p.ready for p in pods)


def test_updates_twice_in_a_transaction_and_the_admission_cache_sees_them(workloads, path):
    WorkloadChange.objects.all().delete()
    for message in ("first", "second"):
        rows = [(row.pk, message) for row in workloads]
        assert bulk.update_rows(Workload, "pk", ["pending_message"], rows) == REPLICAS

    assert set(Workload.objects.values_list("pending_message", flat=True)) == {"second"}
    changed = WorkloadChange.objects.values_list("workload_id", flat=True)
    assert set(changed) == {row.pk for row in workloads}


def test_many_rows_go_by_copy_few_by_one_statement(
    workloads, monkeypatch, django_assert_num_queries
):
    if connection.vendor != "postgresql":
        pytest.skip("COPY is PostgreSQL's")
    rows = [(row.pk, f"message {row.pk}") for row in workloads]

    with django_assert_num_queries(1):  # one UPDATE ... FROM unnest(...)
        bulk.update_rows(Workload, "pk", ["pending_message"], rows)

    monkeypatch.setattr(bulk, "COPY_MIN_ROWS", REPLICAS)
    with django_assert_num_queries(3):  # CREATE TEMPORARY TABLE, UPDATE, DROP (COPY unseen)
        bulk.update_rows(Workload, "pk", ["pending_message"], rows)


def test_rows_sharing_json_or_alike_json_each_store_theirs(workloads):
    # Values are encoded once per distinct one: by identity, or by content for objects of
    # scalars, where True and 1 are equal but their JSON is not.
    shared = {"cluster_queue": "gpu-queue", "pod_sets": [{"name": "main", "count": 1}]}
    admissions = [shared, shared, {"flag": True}, {"flag": 1}, {"flag": "1"}]
    rows = [(row.pk, admission) for row, admission in zip(workloads, admissions, strict=True)]

    bulk.update_rows(Workload, "pk", ["admission"], rows)

    stored = Workload.objects.in_bulk([row.pk for row in workloads])
    assert [json.dumps(stored[pk].admission, sort_keys=True) for pk, _ in rows] == [
        json.dumps(admission, sort_keys=True) for admission in admissions
    ]


@pytest.mark.parametrize("count", [0, 1, REPLICAS])
def test_a_key_set_selects_the_rows_of_its_keys(workloads, count):
    pks = [row.pk for row in workloads[:count]]

    selected = Workload.objects.filter(pk__in=bulk.key_set(pks))

    assert sorted(selected.values_list("pk", flat=True)) == pks


UPDATED = {
    "phase": Workload.Phase.FINISHED,
    "finished_at": at(minutes=3),
    "admission": {"cluster_queue": "gpu-queue", "pod_sets": [{"name": "main", "count": 1}]},
    "pending_message": 'it\'s "done"',
    "parked_release": None,
    "admissions": 7,
    "evicting": True,
}


def test_rows_updated_by_key_read_back_as_the_orm_updates_them(workloads):
    ours, orms, untouched = workloads[:2], workloads[2:4], workloads[4]

    assert bulk.update_keys(Workload, "pk", [row.pk for row in ours], **UPDATED) == len(ours)
    Workload.objects.filter(pk__in=[row.pk for row in orms]).update(**UPDATED)

    stored = {row.pk: row for row in Workload.objects.all()}
    fields = list(UPDATED)
    expected = [[getattr(stored[row.pk], f) for f in fields] for row in orms]
    assert [[getattr(stored[row.pk], f) for f in fields] for row in ours] == expected
    assert expected[0] == list(UPDATED.values())
    assert stored[untouched.pk].phase == untouched.phase


def test_rows_updated_by_a_foreign_key_and_none_by_no_keys(workloads):
    pods = Pod.objects.filter(workload=workloads[0])
    pods.update(ready=True)

    assert bulk.update_keys(Pod, "workload", [], ready=False) == 0
    assert bulk.update_keys(Pod, "workload", [workloads[0].pk], node=None, ready=False) == 1

    assert list(Pod.objects.filter(ready=True)) == []
    assert Pod.objects.get(workload=workloads[0]).node_id is None
