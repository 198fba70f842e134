"""Kueue Workload objects -> rows and events: ingest, and watch sessions against the fake."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from clusters.models import Cluster
from events.models import Event
from tests.contract.conftest import gpu_cluster_on
from tests.support import NAMESPACE, at
from workloads import tasks
from workloads.kube import apply as kube
from workloads.kube import checkpoints, watch
from workloads.kube.ingest import ingest
from workloads.models import Checkpoint, KubeWatch, Workload

FINETUNE_UID = "uid-finetune"
INFERENCE_UID = "uid-inference"
PREEMPTED_MESSAGE = (
    f"Preempted to accommodate a workload (UID: {INFERENCE_UID}, JobUID: job-uid) "
    "due to prioritization in the ClusterQueue"
)
_seconds = itertools.count(1)
WORKLOADS = watch.WORKLOADS.resource


def stamp() -> str:
    """The next instant on the test clock, as Kubernetes writes times."""
    return (at() + timedelta(seconds=next(_seconds))).isoformat().replace("+00:00", "Z")


def kueue_workload(
    name: str, uid: str, owner: tuple[str, str], **conditions: tuple[str, str]
) -> dict[str, Any]:
    """A Kueue Workload object as Kueue writes it; conditions are type -> (status, reason)."""
    when = stamp()
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": kind,
                "status": state,
                "reason": reason,
                "message": PREEMPTED_MESSAGE if kind == "Evicted" else "",
                "lastTransitionTime": when,
            }
            for kind, (state, reason) in conditions.items()
        ]
    }
    if conditions.get("QuotaReserved", ("False", ""))[0] == "True":
        status["admission"] = {
            "clusterQueue": "gpu-queue",
            "podSetAssignments": [
                {"name": "main", "flavors": {"nvidia.com/gpu": "l4", "cpu": "l4"}, "count": 2}
            ],
        }
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": owner[0], "name": owner[1], "controller": True}
            ],
        },
        "spec": {"queueName": "team-llm"},
        "status": status,
    }


RESERVED = ("True", "QuotaReserved")
ADMITTED = ("True", "Admitted")


def finetune(**conditions: tuple[str, str]) -> dict[str, Any]:
    return kueue_workload("job-finetune-7f3a2", FINETUNE_UID, ("Job", "finetune"), **conditions)


def inference(**conditions: tuple[str, str]) -> dict[str, Any]:
    pod = ("Pod", "inference-5d8f9c7b6-x2x9k")
    return kueue_workload("pod-inference-5d8f9c7b6-x2x9k-1a2b3", INFERENCE_UID, pod, **conditions)


def admitted_finetune() -> dict[str, Any]:
    return finetune(QuotaReserved=RESERVED, Admitted=ADMITTED)


def preempted_finetune(released: bool) -> dict[str, Any]:
    """Kueue preempted it; once its pods are gone it releases the quota and requeues it."""
    if released:
        return finetune(
            QuotaReserved=("False", "Pending"),
            Admitted=("False", "NoReservation"),
            Evicted=("True", "Preempted"),
            Preempted=("True", "InClusterQueue"),
            Requeued=("True", "Preempted"),
        )
    return finetune(
        QuotaReserved=RESERVED,
        Admitted=ADMITTED,
        Evicted=("True", "Preempted"),
        Preempted=("True", "InClusterQueue"),
    )


@pytest.fixture
def cluster(db, fake_kube):
    return gpu_cluster_on(fake_kube)


def kinds(workload: Workload) -> list[str]:
    events = Event.objects.filter(workload_name=workload.name).order_by("id")
    return [e.kind for e in events if e.kind != "workload.submitted"]


def finetune_row() -> Workload:
    return Workload.objects.get(owner__name="finetune")


def test_a_preempted_training_job_goes_through_the_simulators_events(cluster):
    ingest(cluster, inference(QuotaReserved=RESERVED, Admitted=ADMITTED), at())
    for obj in (admitted_finetune(), preempted_finetune(False), preempted_finetune(True)):
        ingest(cluster, obj, at())
    checkpoints.record_from_log(
        finetune_row(), ["[INFO] Saving model checkpoint to /data/out/checkpoint-120"], at()
    )
    ingest(cluster, admitted_finetune(), at())
    ingest(cluster, finetune(QuotaReserved=RESERVED, Finished=("True", "Succeeded")), at())

    row = finetune_row()
    assert kinds(row) == [
        "workload.quota_reserved",
        "workload.admitted",
        "workload.preempted",
        "workload.evicted",
        "workload.requeued",
        "checkpoint.saved",
        "workload.quota_reserved",
        "workload.admitted",
        "workload.resumed",
        "workload.finished",
    ]
    preempted = Event.objects.get(workload_name=row.name, kind="workload.preempted")
    inference_row = Workload.objects.get(owner__name="inference")
    assert preempted.data == {
        "reason": "InClusterQueue",
        "preemptor": inference_row.name,
        "preemptor_object": "Deployment/llm/inference",
        "preemptor_namespace": "llm",
        "preemptor_priority": 100,
        "message_for_other_teams": "preempted by a workload of another team (priority 100): "
        "InClusterQueue",
    }
    reserved = Event.objects.filter(workload_name=row.name, kind="workload.quota_reserved").first()
    assert reserved.data == {"cluster_queue": "gpu-queue", "flavor": "l4"}
    resumed = Event.objects.get(workload_name=row.name, kind="workload.resumed")
    assert resumed.data == {"step": 120}
    assert (row.phase, row.admissions, row.preemptions) == ("Finished", 2, 1)
    assert row.owner.preemptions == 1


def test_an_object_seen_twice_emits_nothing_new(cluster):
    for obj in (admitted_finetune(), preempted_finetune(False)):
        assert ingest(cluster, obj, at())
        assert ingest(cluster, obj, at()) == []


def test_an_eviction_other_than_preemption_shows_when_the_quota_is_released(cluster):
    timeout = ("True", "PodsReadyTimeout")
    ingest(cluster, admitted_finetune(), at())

    assert ingest(cluster, finetune(QuotaReserved=RESERVED, Evicted=timeout), at()) == []
    ingest(cluster, finetune(QuotaReserved=("False", "Pending"), Evicted=timeout), at())

    evicted = Event.objects.get(workload_name=finetune_row().name, kind="workload.evicted")
    assert evicted.data == {"reason": "PodsReadyTimeout"}
    assert kinds(finetune_row())[-2:] == ["workload.admitted", "workload.evicted"]


def test_the_first_sighting_binds_the_row_and_sets_its_admission(cluster):
    ingest(cluster, finetune(QuotaReserved=RESERVED), at())

    row = finetune_row()
    assert row.phase == "QuotaReserved"
    assert row.admission == {
        "cluster_queue": "gpu-queue",
        "pod_sets": [
            {"name": "main", "flavors": {"nvidia.com/gpu": "l4", "cpu": "l4"}, "count": 2}
        ],
    }
    assert [link.name for link in row.kueue_links.all()] == ["job-finetune-7f3a2"]


def test_workloads_accelplane_did_not_submit_are_left_alone(cluster):
    other = kueue_workload("job-other-1", "uid-other", ("Job", "other"), QuotaReserved=RESERVED)

    assert ingest(cluster, other, at()) == []


def test_checkpoint_lines_older_than_the_latest_are_not_recorded(cluster):
    ingest(cluster, admitted_finetune(), at())
    row = finetune_row()
    log = [
        "Saving model checkpoint to /data/out/checkpoint-100",
        "Saving current state to /data/out/checkpoint-200",
    ]

    checkpoints.record_from_log(row, log, at())
    checkpoints.record_from_log(row, log, at())

    assert list(Checkpoint.objects.values_list("step", "path")) == [
        (100, "/data/out/checkpoint-100"),
        (200, "/data/out/checkpoint-200"),
    ]


# Watch sessions against the fake apiserver.


def session(cluster: Cluster, api) -> watch.Session:
    return watch.watch_resource(cluster, api, watch.WORKLOADS, timeout_seconds=1)


def stored_version(cluster: Cluster) -> str:
    return KubeWatch.objects.get(cluster=cluster, resource=WORKLOADS).resource_version


def test_the_first_session_lists_then_watches_and_stores_the_version(cluster, api, fake_kube):
    fake_kube.put(admitted_finetune())

    first = session(cluster, api)

    assert (first.relisted, first.events) == (True, 2)
    list_call, watch_call = fake_kube.requests("GET", "/workloads")
    assert list_call.path == watch_call.path == "/apis/kueue.x-k8s.io/v1beta2/workloads"
    assert watch_call.query["watch"] == "true"
    assert watch_call.query["resourceVersion"] == str(fake_kube.resource_version)
    assert stored_version(cluster) == str(fake_kube.resource_version)  # the closing BOOKMARK


def test_a_dropped_watch_resumes_from_the_stored_version_without_duplicates(
    cluster, api, fake_kube
):
    fake_kube.put(admitted_finetune())
    session(cluster, api)
    fake_kube.put(preempted_finetune(False))
    cut_after = fake_kube.resource_version
    fake_kube.put(preempted_finetune(True))
    fake_kube.drop_next_watch(after=1)

    dropped = session(cluster, api)
    resumed = session(cluster, api)

    assert (dropped.disconnected, dropped.events, dropped.resource_version) == (
        True,
        1,
        str(cut_after),
    )
    assert fake_kube.requests("GET")[-1].query["resourceVersion"] == str(cut_after)
    assert (resumed.disconnected, resumed.relisted, resumed.events) == (False, False, 2)
    assert kinds(finetune_row()) == [
        "workload.quota_reserved",
        "workload.admitted",
        "workload.preempted",
        "workload.evicted",
        "workload.requeued",
    ]


def test_an_expired_version_relists(cluster, api, fake_kube):
    session(cluster, api)
    fake_kube.put(admitted_finetune())
    fake_kube.compact()  # the version the first session stored is gone

    expired = session(cluster, api)

    assert (expired.relisted, expired.events) == (True, 2)
    assert stored_version(cluster) == str(fake_kube.resource_version)
    assert kinds(finetune_row()) == ["workload.quota_reserved", "workload.admitted"]


def test_the_watch_task_runs_a_session_and_stops_for_clusters_it_cannot_reach(
    cluster, fake_kube, settings
):
    fake_kube.put(admitted_finetune())

    assert watch.run_session(cluster.pk, WORKLOADS, timeout_seconds=1) == 0
    assert finetune_row().phase == "Admitted"
    Cluster.objects.filter(pk=cluster.pk).update(endpoint="")
    assert watch.run_session(cluster.pk, WORKLOADS, timeout_seconds=1) is None


def test_a_replacement_pods_workload_binds_the_same_replica_after_a_delete(cluster, api, fake_kube):
    pod = ("Pod", "inference-5d8f9c7b6-x2x9k")
    first = kueue_workload(
        "pod-inference-a", "uid-a", pod, QuotaReserved=RESERVED, Admitted=ADMITTED
    )
    fake_kube.put(first)
    session(cluster, api)
    # Kueue preempts the pod: evicted, quota released, not requeued; the pod and its Workload go.
    fake_kube.put(
        kueue_workload(
            "pod-inference-a",
            "uid-a",
            pod,
            QuotaReserved=("False", "Pending"),
            Evicted=("True", "Preempted"),
            Requeued=("False", "Preempted"),
        )
    )
    kube.delete(api, kube.ObjectRef.of_manifest(first))
    replacement = ("Pod", "inference-5d8f9c7b6-q7w8e")
    fake_kube.put(
        kueue_workload(
            "pod-inference-b", "uid-b", replacement, QuotaReserved=RESERVED, Admitted=ADMITTED
        )
    )

    session(cluster, api)

    row = Workload.objects.get(owner__name="inference")
    assert kinds(row) == [
        "workload.quota_reserved",
        "workload.admitted",
        "workload.preempted",
        "workload.evicted",
        "workload.quota_reserved",
        "workload.admitted",
    ]
    assert [link.uid for link in row.kueue_links.all()] == ["uid-b"]


@pytest.mark.parametrize(
    ("delay", "next_sessions"),
    [(0, [((7, "pods"), 0)]), (5.0, [((7, "pods"), 5.0)]), (None, [])],
)
def test_the_watch_task_queues_the_next_session_until_the_cluster_is_not_watched(
    db, monkeypatch, delay, next_sessions
):
    queued = []
    monkeypatch.setattr(watch, "run_session", lambda cluster_id, resource: delay)
    task = tasks.watch_resource
    monkeypatch.setattr(
        task, "apply_async", lambda args, countdown: queued.append((args, countdown))
    )

    task.run(7, "pods")

    assert queued == next_sessions


def test_an_eager_watch_task_runs_one_session(db, monkeypatch):
    sessions = []
    monkeypatch.setattr(watch, "run_session", lambda *session: sessions.append(session) or 0)

    tasks.watch_resource.apply(args=(7, WORKLOADS))

    assert sessions == [(7, WORKLOADS)]


def test_watch_sessions_go_to_the_watchers_queue_not_the_admitting_workers():
    route = tasks.watch_resource.app.amqp.router.route({}, tasks.watch_resource.name)

    assert route["queue"].name == "watch"


def test_an_unreachable_apiserver_retries_the_session_later(cluster):
    Cluster.objects.filter(pk=cluster.pk).update(endpoint="http://127.0.0.1:9")

    assert watch.run_session(cluster.pk, WORKLOADS, timeout_seconds=1) == watch.RETRY_SECONDS


def test_one_watcher_holds_a_clusters_lease_until_it_releases_or_it_expires(cluster):
    now = at()
    assert watch.claim(cluster.pk, WORKLOADS, now)
    assert not watch.claim(cluster.pk, WORKLOADS, now + timedelta(seconds=watch.SESSION_SECONDS))
    assert watch.claim(cluster.pk, "pods", now)  # each resource has a lease of its own
    # A worker that died mid-session: its lease runs out and another worker takes over.
    expired = now + timedelta(seconds=watch.SESSION_SECONDS) + watch.LEASE_MARGIN
    assert watch.claim(cluster.pk, WORKLOADS, expired + timedelta(seconds=1))
    watch.release(cluster.pk, WORKLOADS)
    assert watch.claim(cluster.pk, WORKLOADS, expired + timedelta(seconds=2))


def test_beat_starts_one_watch_per_reachable_cluster_and_resource_and_no_second_one(
    cluster, monkeypatch
):
    started = []
    monkeypatch.setattr(tasks.watch_resource, "delay", lambda *session: started.append(session))
    Cluster.objects.create(name="simulated", status="RUNNING")  # nothing to watch there

    tasks.watch_clusters()
    tasks.watch_clusters()  # the first sessions still hold the leases

    assert started == [(cluster.pk, resource) for resource in watch.WATCHED]
    assert {"nodes", "pods", WORKLOADS, "jobs.batch", "clusterqueues.kueue.x-k8s.io"} <= {
        resource for _, resource in started
    }


def test_a_session_renews_its_lease_and_the_last_one_releases_it(cluster, monkeypatch):
    monkeypatch.setattr(tasks.watch_resource, "apply_async", lambda *a, **k: None)
    monkeypatch.setattr(watch, "run_session", lambda cluster_id, resource: 0)
    started = timezone.now()
    assert watch.claim(cluster.pk, WORKLOADS, started)
    tasks.watch_resource.run(cluster.pk, WORKLOADS)
    lease = KubeWatch.objects.get(cluster=cluster).leased_until
    # Held through the next session: the beat starts no second watcher meanwhile.
    assert lease >= started + timedelta(seconds=watch.SESSION_SECONDS)

    monkeypatch.setattr(watch, "run_session", lambda cluster_id, resource: None)  # unwatchable
    tasks.watch_resource.run(cluster.pk, WORKLOADS)
    assert KubeWatch.objects.get(cluster=cluster).leased_until is None


def trainer_pod(job_name: str, name: str) -> dict[str, Any]:
    labels = {"batch.kubernetes.io/job-name": job_name}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {"containers": [{"name": "trainer", "image": "trainer"}]},
    }


def test_a_session_records_checkpoints_from_the_training_pods_logs(cluster, fake_kube):
    fake_kube.put(admitted_finetune())
    fake_kube.put(trainer_pod("finetune", "finetune-0-abcde"))
    fake_kube.put(trainer_pod("someone-elses-job", "other-0-fghij"))
    fake_kube.logs[(NAMESPACE, "finetune-0-abcde")] = (
        "{'loss': 1.92, 'epoch': 0.5}\n"
        "[INFO|trainer.py:3984] Saving model checkpoint to /data/out/checkpoint-50\n"
        "[INFO|trainer.py:3984] Saving model checkpoint to /data/out/checkpoint-100\n"
    )
    fake_kube.logs[(NAMESPACE, "other-0-fghij")] = "Saving model checkpoint to /x/checkpoint-900\n"

    watch.run_session(cluster.pk, WORKLOADS, timeout_seconds=1)
    watch.run_session(cluster.pk, WORKLOADS, timeout_seconds=1)  # read again: nothing added

    assert list(Checkpoint.objects.values_list("owner__name", "step", "path")) == [
        ("finetune", 50, "/data/out/checkpoint-50"),
        ("finetune", 100, "/data/out/checkpoint-100"),
    ]
    (read, *_) = fake_kube.requests("GET", "/pods/finetune-0-abcde/log")
    assert int(read.query["sinceSeconds"]) == 2 * watch.SESSION_SECONDS
