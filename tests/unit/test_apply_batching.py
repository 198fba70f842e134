"""A request's new objects are inserted together, and store what one at a time would."""

from __future__ import annotations

import pytest
import yaml
from django.apps import apps
from django.core.management.color import no_style
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from events.models import Event
from tests.support import NAMESPACE, URGENT_CLASS, at, deployment, job, row_counts
from workloads import services
from workloads.manifests import ManifestError
from workloads.models import KubeObject, Pod, Workload


def apply(cluster, text, now=None):
    return services.apply(
        cluster,
        text,
        source="request.yaml",
        now=now or at(),
        namespace=NAMESPACE,
        admit=services.Admit.SKIP,
    )


def documents(*texts):
    return "---\n".join(texts)


def labelled(manifest, **labels):
    body = yaml.safe_load(manifest)
    body["metadata"].setdefault("labels", {}).update(labels)
    return yaml.safe_dump(body, sort_keys=False)


def annotated(manifest, **annotations):
    body = yaml.safe_load(manifest)
    body["metadata"].setdefault("annotations", {}).update(annotations)
    return yaml.safe_dump(body, sort_keys=False)


def stored(cluster):
    """Every row the request may have written, in insertion order."""
    events = Event.objects.filter(cluster=cluster.name).order_by("id")
    return {
        "objects": list(KubeObject.objects.filter(cluster=cluster).order_by("pk").values()),
        "workloads": list(Workload.objects.filter(cluster=cluster).order_by("pk").values()),
        "pods": list(Pod.objects.filter(cluster=cluster).order_by("pk").values()),
        "events": list(events.values("kind", "namespace", "object_key", "workload_name", "data")),
    }


def applied_and_rolled_back(cluster, text):
    """What `text` applies and stores; then undone, primary key sequences included."""
    savepoint = transaction.savepoint()
    results = apply(cluster, text, now=at(minutes=1))
    rows = stored(cluster)
    transaction.savepoint_rollback(savepoint)
    # SQLite's sequences roll back with the rows; PostgreSQL's do not.
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), apps.get_models()):
            cursor.execute(sql)
    return [(r.key, r.action, r.pk) for r in results], rows


@pytest.fixture
def mixed_request(gpu_queues):
    """Existing objects to configure and leave unchanged, and a request that also creates
    Jobs and Deployments (queued and not) around a new WorkloadPriorityClass."""
    apply(gpu_queues, documents(job("kept"), job("changed"), deployment("scaled")))
    return documents(
        job("a"),
        deployment("b", replicas=2),
        deployment("plain", replicas=2, queue=None),
        job("kept"),
        job("changed", pods=1),
        URGENT_CLASS,
        labelled(job("c"), **{"kueue.x-k8s.io/priority-class": "urgent"}),
        deployment("scaled", replicas=3),
        job("d", pods=1),
        deployment("e", replicas=3, priority_class="low"),
    )


def test_a_request_stores_what_one_document_at_a_time_stores(
    gpu_queues, mixed_request, monkeypatch
):
    batched = applied_and_rolled_back(gpu_queues, mixed_request)

    add = services._NewObjects.add

    def add_and_insert(self, *args):
        new = add(self, *args)
        self.insert()
        return new

    monkeypatch.setattr(services._NewObjects, "add", add_and_insert)
    one_at_a_time = applied_and_rolled_back(gpu_queues, mixed_request)

    assert batched == one_at_a_time
    results, rows = batched
    assert [(key.rpartition("/")[2], action) for key, action, _ in results] == [
        ("a", "created"),
        ("b", "created"),
        ("plain", "created"),
        ("kept", "unchanged"),
        ("changed", "configured"),
        ("urgent", "created"),
        ("c", "created"),
        ("scaled", "configured"),
        ("d", "created"),
        ("e", "created"),
    ]
    by_name = {w["name"].split("-")[1]: w["priority"] for w in rows["workloads"]}
    assert by_name["c"] == 1000
    assert len(rows["pods"]) == 2 + 2 + 3 + 3  # gated b and e, unmanaged plain, scaled


def test_new_objects_of_a_request_are_inserted_in_one_statement_each(gpu_queues):
    request = documents(
        *(job(f"job-{i}", pods=1) for i in range(5)),
        deployment("served", replicas=3),
        deployment("plain", queue=None),
    )

    with CaptureQueriesContext(connection) as captured:
        results = apply(gpu_queues, request, now=at(minutes=1))

    inserts = [q["sql"].split("(")[0] for q in captured if q["sql"].startswith("INSERT")]
    assert inserts.count('INSERT INTO "workloads_kubeobject" ') == 1
    assert inserts.count('INSERT INTO "workloads_workload" ') == 1
    assert [r.action for r in results] == ["created"] * 7
    assert [r.pk for r in results] == sorted(r.pk for r in results)
    assert Workload.objects.filter(cluster=gpu_queues).count() == 5 + 3
    events = Event.objects.filter(cluster=gpu_queues.name, at=at(minutes=1)).order_by("id")
    assert list(events.values_list("kind", flat=True)) == [
        *(["object.created", "workload.submitted"] * 5),
        "object.created",
        *(["workload.submitted"] * 3),
        "object.created",
    ]


def test_the_first_bad_document_is_refused_and_nothing_is_stored(gpu_queues):
    before = row_counts()
    request = documents(
        job("good"),
        labelled(job("unknown-class"), **{"kueue.x-k8s.io/priority-class": "missing"}),
        annotated(job("bad-simulation"), **{"sim.accelplane.dev/step-time": "0"}),
        job("after"),
    )

    with pytest.raises(ManifestError) as refused:
        apply(gpu_queues, request)

    assert refused.value.document == 2
    assert refused.value.path == "metadata.labels[kueue.x-k8s.io/priority-class]"
    counts = row_counts()
    assert counts.pop("events.Event") == before.pop("events.Event") + 1  # workload.rejected
    assert counts == before
