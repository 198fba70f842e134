"""A submission over the REST API runs a fixed few queries, however full the cluster is."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from tests.api.test_workloads import post_manifests
from tests.support import T0, job
from workloads import admission, services, tasks
from workloads.models import KubeObject

pytestmark = pytest.mark.django_db

# One Job submitted while a worker admits (ACCELPLANE_ADMISSION=worker), on PostgreSQL:
#  1. the API token, its user, and the user's namespaces and roles (authentication, and the
#     authorization of every document)
#  2. the cluster (the first two: one cluster, so no ?cluster= needed)
#  3. SAVEPOINT: services.apply's transaction (BEGIN outside a test)
#  4. which of the objects the documents name exist (none here; those that do are then
#     loaded, one more query for a resubmission), and every WorkloadPriorityClass and
#     PriorityClass of the cluster: one UNION
#  5. INSERT the Job (one for all the request's new objects)
#  6. INSERT its Kueue workloads (one for all the new objects' replicas)
#  7. the last seq (SQLite only: it numbers events as it writes them)
#  8. INSERT its events (object.created, workload.submitted)
#  9. RELEASE SAVEPOINT (COMMIT outside a test)
# and nothing read for the response: it shows what was created as it was stored (admitting in
# the request, the objects are read again, and their workloads: two queries more), and
# nothing after the commit: the worker's settle the submission queues numbers its events
# (on PostgreSQL; admitting in the request, it numbers them itself: seven queries more).
SUBMISSION_QUERIES = 9

LEADER_WORKER_SET = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {{name: {name}, labels: {{kueue.x-k8s.io/queue-name: team-llm}}}}
spec:
  replicas: {replicas}
  leaderWorkerTemplate:
    size: 2
    workerTemplate:
      spec:
        containers:
          - name: worker
            resources: {{limits: {{nvidia.com/gpu: "1"}}, requests: {{cpu: "1", memory: 1Gi}}}}
"""


def expected(queries: int) -> int:
    return queries - 1 if connection.vendor == "postgresql" else queries  # no last seq


def submission_queries(client, text: str) -> int:
    with (
        CaptureQueriesContext(connection) as captured,
        TestCase.captureOnCommitCallbacks(execute=True),
    ):
        response = post_manifests(client, text, namespace="llm")
    assert response.status_code == 201, response.json()
    return len(captured)


def fill(cluster, count: int) -> None:
    """`count` more LocalQueues and ClusterQueues, and `count` more workloads in them."""
    queues = "---\n".join(
        f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: cq-{i}}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors: [{{name: l4, resources: [{{name: nvidia.com/gpu, nominalQuota: 1}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: lq-{i}, namespace: llm}}
spec: {{clusterQueue: cq-{i}}}
"""
        for i in range(count)
    )
    services.apply(cluster, queues, source="queues.yaml", now=T0)
    workloads = "---\n".join(job(f"existing-{i}", pods=1, gpus=1) for i in range(count))
    services.apply(
        cluster, workloads, source="jobs.yaml", now=T0, namespace="llm", admit=services.Admit.SKIP
    )


def test_a_submission_costs_the_same_few_queries_however_full_the_cluster(alice, tenants, settings):
    settings.ACCELPLANE_ADMISSION = "worker"
    post_manifests(alice, job("warm-up", pods=1, gpus=1), namespace="llm")  # caches, sessions
    on_an_empty_cluster = submission_queries(alice, job("first", pods=1, gpus=1))
    fill(tenants, 30)
    on_a_full_cluster = submission_queries(alice, job("second", pods=1, gpus=1))
    assert on_an_empty_cluster == on_a_full_cluster == expected(SUBMISSION_QUERIES)


def test_replicas_of_a_leader_worker_set_add_no_query(alice, settings):
    settings.ACCELPLANE_ADMISSION = "worker"
    post_manifests(alice, job("warm-up", pods=1, gpus=1), namespace="llm")
    one = submission_queries(alice, LEADER_WORKER_SET.format(name="one", replicas=1))
    four = submission_queries(alice, LEADER_WORKER_SET.format(name="four", replicas=4))
    assert one == four == expected(SUBMISSION_QUERIES)


def test_a_burst_of_submissions_queues_one_admission_and_runs_none_in_the_request(
    alice, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.ACCELPLANE_ADMISSION = "worker"
    queued = []
    monkeypatch.setattr(
        tasks.settle_cluster, "apply_async", lambda args, countdown: queued.append(args)
    )
    for entry in ("settle", "admit_pending"):
        monkeypatch.setattr(admission, entry, pytest.fail)
    for i in range(5):
        with django_capture_on_commit_callbacks(execute=True):
            post_manifests(alice, job(f"burst-{i}", pods=1, gpus=1), namespace="llm")
    (cluster_id,) = queued  # the worker's one run admits the whole burst
    assert cluster_id == (KubeObject.objects.get(name="burst-0").cluster_id,)


def test_a_submission_admitting_in_the_request_settles_the_cluster_once(
    alice, settings, monkeypatch
):
    settings.ACCELPLANE_ADMISSION = "request"
    settled = []
    settle = admission.settle

    def counted(cluster, now):
        settled.append(cluster.name)
        settle(cluster, now)

    monkeypatch.setattr(admission, "settle", counted)
    response = post_manifests(alice, job("inline", pods=1, gpus=1), namespace="llm")
    assert response.json()["objects"][0]["phase"] == "Admitted"
    assert settled == ["llm-cluster"]


def test_a_submission_admitted_in_the_request_is_scheduled_once(alice, settings, monkeypatch):
    """The simulated round after its admission binds the pods, which is a change; but with
    nothing left pending, the cluster is not loaded and scheduled a second time."""
    settings.ACCELPLANE_ADMISSION = "request"
    scheduled = []
    admit_pending = admission.admit_pending

    def counted(cluster, now, *args):
        scheduled.append(cluster.name)
        return admit_pending(cluster, now, *args)

    monkeypatch.setattr(admission, "admit_pending", counted)
    response = post_manifests(alice, job("inline", pods=1, gpus=1), namespace="llm")
    assert response.json()["objects"][0]["phase"] == "Admitted"
    assert scheduled == ["llm-cluster"]


def test_what_a_submission_answers_without_reading_back_is_what_was_stored(alice, settings):
    """With workers admitting, the objects a submission created are answered as it stored
    them, not read again: each is as the API reads it afterwards; one changed by the same
    apply (configured) is read again."""
    settings.ACCELPLANE_ADMISSION = "worker"
    post_manifests(alice, job("resubmitted", pods=1, gpus=1), namespace="llm")
    documents = "---\n".join(
        [
            job("resubmitted", pods=2, gpus=1),
            LEADER_WORKER_SET.format(name="serving", replicas=2),
            job("fresh", pods=1, gpus=1),
        ]
    )
    response = post_manifests(alice, documents, namespace="llm")
    assert response.status_code == 201, response.json()
    body = response.json()

    assert [a["action"] for a in body["applied"]] == ["configured", "created", "created"]
    answered = body["objects"]
    assert [o["name"] for o in answered] == ["resubmitted", "serving", "fresh"]  # by id
    assert [len(o["workloads"]) for o in answered] == [1, 2, 1]
    for obj in answered:
        stored = alice.get(f"/api/v1/workloads/{obj['id']}").json()
        stored.pop("checkpoint_token", None)
        assert obj == stored
