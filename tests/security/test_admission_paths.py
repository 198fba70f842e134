"""Admission paths a user can take: what-if in worker mode, scaling groups that were never
admitted, and Deployments with thousands of replicas (issue 13, findings 10, 11, 12)."""

from __future__ import annotations

import pytest
import yaml
from django.core.cache import cache

from tests.api.conftest import alice, tenants  # noqa: F401 (fixtures)
from tests.api.test_workloads import post_manifests
from tests.support import NAMESPACE, T0, at, deployment, row_counts
from workloads import services
from workloads.models import Pod, Workload
from workloads.whatif import whatif

# 9 CPUs a group of two pods: the 72-CPU ClusterQueue admits 8 of 10 groups.
GROUP_CPU = "4500m"


def lws(replicas: int, *, queue: str | None = "team-llm") -> str:
    template = {
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": GROUP_CPU}}}]}
    }
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    body = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": template,
                "workerTemplate": template,
            },
        },
    }
    return yaml.safe_dump(body)


def tiny_deployment(replicas: int, *, queue: str | None) -> str:
    body = yaml.safe_load(deployment("tiny", replicas=replicas, queue=queue))
    pod = body["spec"]["template"]["spec"]
    pod["containers"][0]["resources"] = {"requests": {"cpu": "1m", "memory": "1Mi"}}
    return yaml.safe_dump(body)


def apply(cluster, text, now=T0):
    return services.apply(cluster, text, source="t.yaml", now=now, namespace=NAMESPACE)


def active_groups(name: str) -> dict[str, list[int]]:
    rows = Workload.objects.filter(owner__name=name, phase__in=Workload.ACTIVE_PHASES)
    by_phase: dict[str, list[int]] = {}
    for phase, index in rows.order_by("replica_index").values_list("phase", "replica_index"):
        by_phase.setdefault(phase, []).append(index)
    return by_phase


# Finding 10: what-if admits inline whatever the admission mode.


def test_whatif_in_worker_mode_reports_admitted_for_a_job_that_fits(gpu_queues, settings):
    settings.ACCELPLANE_ADMISSION = "worker"
    before = row_counts()
    text = deployment("probe", replicas=1, gpus=2)

    report = whatif(gpu_queues, text, "probe.yaml", at(seconds=1), namespace=NAMESPACE)

    assert [w["result"] for w in report["workloads"]] == ["admitted"]
    assert row_counts() == before
    assert cache.get(f"accelplane:settle-queued:{gpu_queues.pk}") is None


def test_whatif_api_in_worker_mode_reports_admitted(alice, settings):  # noqa: F811
    settings.ACCELPLANE_ADMISSION = "worker"

    response = post_manifests(alice, deployment("probe"), path="/api/v1/whatif", namespace="llm")

    assert response.status_code == 200, response.json()
    assert [w["result"] for w in response.json()["workloads"]] == ["admitted"]
    assert not Workload.objects.filter(owner__name="probe").exists()


def test_whatif_in_worker_mode_queues_no_admission_task(
    gpu_queues, settings, django_capture_on_commit_callbacks
):
    settings.ACCELPLANE_ADMISSION = "worker"
    with django_capture_on_commit_callbacks() as callbacks:
        whatif(gpu_queues, deployment("probe"), "probe.yaml", at(seconds=1), namespace=NAMESPACE)
    assert callbacks == []


def test_apply_in_worker_mode_leaves_admission_to_the_worker(gpu_queues, settings):
    settings.ACCELPLANE_ADMISSION = "worker"
    apply(gpu_queues, deployment("served"), now=at(seconds=1))
    assert active_groups("served") == {Workload.Phase.PENDING: [0]}


def test_apply_can_admit_inline_in_worker_mode(gpu_queues, settings):
    settings.ACCELPLANE_ADMISSION = "worker"
    services.apply(
        gpu_queues,
        deployment("served"),
        source="t.yaml",
        now=at(seconds=1),
        namespace=NAMESPACE,
        admit=services.Admit.NOW,
    )
    assert active_groups("served") == {Workload.Phase.ADMITTED: [0]}


# Finding 11: scaling down groups that were never admitted (they have no pods yet).


def test_scaling_a_leaderworkerset_down_past_its_pending_groups(gpu_queues):
    apply(gpu_queues, lws(10))
    assert active_groups("serve") == {
        Workload.Phase.ADMITTED: list(range(8)),
        Workload.Phase.PENDING: [8, 9],
    }
    obj = services.get_object(gpu_queues, "LeaderWorkerSet", NAMESPACE, "serve")

    services.scale(obj, 3, at(seconds=10))

    # A LeaderWorkerSet keeps groups 0..n-1: the highest indexes go first.
    assert active_groups("serve") == {Workload.Phase.ADMITTED: [0, 1, 2]}
    assert sorted(Pod.objects.filter(owner=obj).values_list("name", flat=True)) == [
        "serve-0",
        "serve-0-1",
        "serve-1",
        "serve-1-1",
        "serve-2",
        "serve-2-1",
    ]


def test_scaling_a_leaderworkerset_to_zero_and_back_up(gpu_queues):
    apply(gpu_queues, lws(10))
    obj = services.get_object(gpu_queues, "LeaderWorkerSet", NAMESPACE, "serve")

    services.scale(obj, 0, at(seconds=10))
    assert active_groups("serve") == {}
    assert not Pod.objects.filter(owner=obj).exists()

    services.scale(obj, 4, at(seconds=20))
    assert active_groups("serve") == {Workload.Phase.ADMITTED: [0, 1, 2, 3]}


def test_scaling_an_unqueued_leaderworkerset_down_and_up(gpu_queues):
    apply(gpu_queues, lws(5, queue=None))
    obj = services.get_object(gpu_queues, "LeaderWorkerSet", NAMESPACE, "serve")

    services.scale(obj, 2, at(seconds=10))
    names = sorted(Pod.objects.filter(owner=obj).values_list("name", flat=True))
    assert names == ["serve-0", "serve-0-1", "serve-1", "serve-1-1"]

    services.scale(obj, 3, at(seconds=20))
    assert Pod.objects.filter(owner=obj, replica_index=2).count() == 2


def test_scaling_a_deployment_down_past_its_pending_replicas_to_zero_and_back(gpu_queues):
    apply(gpu_queues, deployment("served", replicas=5, gpus=2))  # 3 fit in 6 GPUs
    assert len(active_groups("served")[Workload.Phase.PENDING]) == 2
    obj = services.get_object(gpu_queues, "Deployment", NAMESPACE, "served")

    services.scale(obj, 2, at(seconds=10))
    assert len(active_groups("served")[Workload.Phase.ADMITTED]) == 2
    assert Pod.objects.filter(owner=obj).count() == 2

    services.scale(obj, 0, at(seconds=20))
    assert active_groups("served") == {}

    services.scale(obj, 3, at(seconds=30))
    assert len(active_groups("served")[Workload.Phase.ADMITTED]) == 3
    assert Pod.objects.filter(owner=obj).count() == 3


# Finding 12b: pod names of a Deployment's replicas never collide.


@pytest.mark.parametrize("queue", [None, "team-llm"])
def test_a_deployment_of_thousands_of_replicas_is_created(gpu_queues, queue):
    replicas = 3000

    apply(gpu_queues, tiny_deployment(replicas, queue=queue))

    obj = services.get_object(gpu_queues, "Deployment", NAMESPACE, "tiny")
    names = list(Pod.objects.filter(owner=obj).values_list("name", flat=True))
    assert len(names) == len(set(names)) == replicas


def test_deployment_pod_names_stay_unique_across_scaling(gpu_queues):
    apply(gpu_queues, tiny_deployment(1000, queue=None))
    obj = services.get_object(gpu_queues, "Deployment", NAMESPACE, "tiny")

    for step, replicas in enumerate((400, 3000, 0, 2000), start=1):
        services.scale(obj, replicas, at(seconds=step))
        assert Pod.objects.filter(owner=obj).count() == replicas


@pytest.mark.parametrize(("kind", "text"), [("LeaderWorkerSet", lws(3)), ("Deployment", None)])
def test_scaling_up_after_the_object_ended_replaces_its_finished_pods(gpu_queues, kind, text):
    apply(gpu_queues, text or deployment("serve", replicas=3))
    obj = services.get_object(gpu_queues, kind, NAMESPACE, "serve")
    services.end(obj, at(seconds=5), failed=False)

    services.scale(obj, 2, at(seconds=10))

    assert active_groups("serve") == {Workload.Phase.ADMITTED: [0, 1]}
    assert set(Pod.objects.filter(owner=obj).values_list("replica_index", flat=True)) == {0, 1}
