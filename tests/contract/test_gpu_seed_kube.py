"""The GPU seed workflow (mix-train-and-inference) end to end through the Kubernetes backend:
the admin's queues and the team's workloads are submitted over the REST API to a gke cluster
(the fake apiserver), Kueue's decisions come back through the watch, and a browser following
/ws/events/ sees the fine-tune admitted, then preempted by the TGI server, as they happen."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from api.consumers import EventsConsumer
from clusters.models import Cluster
from teams import services as teams
from tests.contract.test_kube_watch import (
    ADMITTED,
    INFERENCE_UID,
    RESERVED,
    kueue_workload,
)
from tests.shared import GPU_SEED, GPU_SEED_FILES, GPU_SEED_PLACEHOLDERS, requires_shared
from workloads.kube import watch

pytestmark = [
    requires_shared,
    pytest.mark.django_db(transaction=True),
    pytest.mark.asyncio,
    pytest.mark.usefixtures("short_lived_connections"),
]

FINETUNE = ("Job", "finetune-gemma-l4")
TGI_POD = ("Pod", "tgi-gemma-deployment-6c9f8d7b5-abcde")


def seed(name: str) -> str:
    text = (GPU_SEED / name).read_text()
    for placeholder, value in GPU_SEED_PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    return text


def submit_the_seed(fake_kube) -> User:
    """An admin applies the queues, then the fine-tune and the TGI server, over the REST API."""
    Cluster.objects.create(
        name="gpu", provider="gke", project="demo-project", status="RUNNING", endpoint=fake_kube.url
    )
    admin = User.objects.create_user("root", is_staff=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {teams.issue_token(admin)[1]}")
    for name in (*GPU_SEED_FILES, "fine-tune-l4.yaml", "tgi-gemma-2-9b-it-hp.yaml"):
        response = client.post(
            "/api/v1/workloads?namespace=llm", seed(name), content_type="application/yaml"
        )
        assert response.status_code == 201, (name, response.json())
    return admin


def kueue_admits_the_finetune(fake_kube, cluster_pk: int) -> None:
    fake_kube.put(
        kueue_workload(
            "job-finetune", "uid-ft", FINETUNE, QuotaReserved=RESERVED, Admitted=ADMITTED
        )
    )
    watch.run_session(cluster_pk, watch.WORKLOADS.resource, timeout_seconds=1)


def kueue_preempts_it_for_tgi(fake_kube, cluster_pk: int) -> None:
    fake_kube.put(
        kueue_workload("pod-tgi", INFERENCE_UID, TGI_POD, QuotaReserved=RESERVED, Admitted=ADMITTED)
    )
    fake_kube.put(
        kueue_workload(
            "job-finetune",
            "uid-ft",
            FINETUNE,
            QuotaReserved=("False", "Pending"),
            Evicted=("True", "Preempted"),
            Preempted=("True", "InClusterQueue"),
            Requeued=("True", "Preempted"),
        )
    )
    fake_kube.drop_next_watch(after=1)  # the connection drops mid-stream: the next resumes
    watch.run_session(cluster_pk, watch.WORKLOADS.resource, timeout_seconds=1)
    watch.run_session(cluster_pk, watch.WORKLOADS.resource, timeout_seconds=1)


async def events_until(communicator, kind: str) -> list[dict]:
    """Kueue's workload transitions streamed to the socket, up to the first of `kind`."""
    seen = []
    while True:
        message = await communicator.receive_json_from(timeout=10)
        if message["type"] != "event":
            continue
        event = message["event"]
        if event["kind"].startswith("workload.") and event["kind"] != "workload.submitted":
            seen.append(event)
        if event["kind"] == kind:
            return seen


def transitions(events: list[dict]) -> list[tuple[str, str]]:
    return [(event["kind"], event["object"]) for event in events]


async def test_the_gpu_seed_runs_through_the_kubernetes_backend_to_the_browser(fake_kube):
    admin = await sync_to_async(submit_the_seed)(fake_kube)
    applied = [call.path.rsplit("/", 2)[-2] for call in fake_kube.requests("PATCH")]
    assert applied.count("clusterqueues") == 1
    assert applied.count("jobs") == 1
    assert applied.count("deployments") == 1
    cluster = await Cluster.objects.aget(name="gpu")

    communicator = WebsocketCommunicator(EventsConsumer.as_asgi(), "/ws/events/?after=0")
    communicator.scope["user"] = admin
    assert (await communicator.connect())[0]
    try:
        await sync_to_async(kueue_admits_the_finetune)(fake_kube, cluster.pk)
        admitted = await events_until(communicator, "workload.admitted")
        await sync_to_async(kueue_preempts_it_for_tgi)(fake_kube, cluster.pk)
        preempted = await events_until(communicator, "workload.requeued")
    finally:
        await communicator.disconnect()

    assert transitions(admitted) == [
        ("workload.quota_reserved", "Job/llm/finetune-gemma-l4"),
        ("workload.admitted", "Job/llm/finetune-gemma-l4"),
    ]
    assert transitions(preempted) == [
        ("workload.quota_reserved", "Deployment/llm/tgi-gemma-deployment"),
        ("workload.admitted", "Deployment/llm/tgi-gemma-deployment"),
        ("workload.preempted", "Job/llm/finetune-gemma-l4"),
        ("workload.evicted", "Job/llm/finetune-gemma-l4"),
        ("workload.requeued", "Job/llm/finetune-gemma-l4"),
    ]
    # Kueue names the preemptor by UID; the event names the object the team submitted.
    (preemption,) = (e for e in preempted if e["kind"] == "workload.preempted")
    assert preemption["data"]["preemptor_object"] == "Deployment/llm/tgi-gemma-deployment"
