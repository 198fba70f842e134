"""Another team's objects are redacted everywhere a team member looks (issue 13, finding 5):
a preemption across teams names the preemptor to admins only; the victim's team learns its
priority and the reason. Team llm (alice) and team vision (bob) share ClusterQueue gpu-queue."""

from __future__ import annotations

import json

import pytest
import yaml
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client
from django.utils import timezone

from events.services import record_event
from teams import services as teams
from tests.api.conftest import admin, alice, bob, tenants  # noqa: F401 (fixtures)
from tests.api.test_event_stream import connect, receive_until_caught_up
from tests.api.test_workloads import post_manifests
from tests.support import deployment, job

pytestmark = pytest.mark.django_db

PREEMPTOR = "Deployment/vision/vision-serve"
ANONYMOUS = "preempted by a workload of another team (priority 100): InClusterQueue"
# As workload.preempted events were written before they named the preemptor's namespace.
OLD_PREEMPTED = {
    "message": "preempted by Deployment/vision/old-serve (workload pod-old-serve-1a2b3, "
    "priority 100): InClusterQueue",
    "reason": "InClusterQueue",
    "preemptor": "pod-old-serve-1a2b3",
    "preemptor_object": "Deployment/vision/old-serve",
}


def submit(client, text, namespace):
    response = post_manifests(client, text, namespace=namespace)
    assert response.status_code == 201, response.json()
    return response.json()["objects"][0]["id"]


def vision(text):
    return text.replace("team-llm", "team-vision")


@pytest.fixture
def preempted(alice, bob):  # noqa: F811
    """alice's fine-tune (6 GPUs, priority low) preempted by bob's server (priority high)."""
    train = submit(alice, job(name="llm-train", pods=3), "llm")
    serve = submit(bob, deployment("vision-serve", queue="team-vision"), "vision")
    return {"train": train, "serve": serve}


def events_of(client, path="/api/v1/events?limit=1000"):
    return client.get(path).json()["events"]


def preemption(events):
    (event,) = [e for e in events if e["kind"] == "workload.preempted"]
    return event


def test_the_event_log_tells_priority_and_reason_not_who(admin, alice, preempted):  # noqa: F811
    for path in ("/api/v1/events?limit=1000", f"/api/v1/workloads/{preempted['train']}/events"):
        events = events_of(alice, path)
        event = preemption(events)
        assert event["message"] == ANONYMOUS
        assert event["data"]["preemptor_hidden"] is True
        assert event["data"]["preemptor_priority"] == 100
        assert event["data"]["reason"] == "InClusterQueue"
        assert "vision" not in json.dumps(events)

    seen_by_admin = preemption(events_of(admin))
    assert PREEMPTOR in seen_by_admin["message"]
    assert seen_by_admin["data"]["preemptor_namespace"] == "vision"


def test_explain_hides_the_preemptor_also_once_it_is_deleted(admin, alice, bob, preempted):  # noqa: F811
    url = f"/api/v1/workloads/{preempted['train']}/explain"
    before = alice.get(url).json()
    assert bob.delete(f"/api/v1/workloads/{preempted['serve']}").status_code == 204
    after = alice.get(url).json()

    for report in (before, after):
        (explained,) = report["workloads"]
        by = explained["preemption"]["by"]
        assert by["hidden"] is True
        assert by["priority"] == 100
        assert explained["preemption"]["message"] == ANONYMOUS
        assert "vision" not in json.dumps(report)
    (explained,) = admin.get(url).json()["workloads"]
    assert explained["preemption"]["by"]["object"] == PREEMPTOR


def test_whatif_shows_the_victims_of_another_team_anonymous(alice, bob):  # noqa: F811
    submit(bob, vision(job(name="vision-train", pods=3)), "vision")

    response = post_manifests(alice, deployment("chat"), path="/api/v1/whatif", namespace="llm")

    assert response.status_code == 200, response.json()
    (outcome,) = response.json()["workloads"]
    assert outcome["result"] == "admitted_after_preemption"
    assert [victim["hidden"] for victim in outcome["preempts"]] == [True]
    assert outcome["preempts"][0]["reason"] == "InClusterQueue"
    assert "vision" not in response.content.decode()


def test_kueue_yaml_lists_only_the_callers_local_queues(admin, alice, tenants):  # noqa: F811
    url = f"/api/v1/clusters/{tenants.pk}/kueue.yaml"

    def local_queues(client):
        documents = yaml.safe_load_all(client.get(url).content)
        return sorted(d["metadata"]["namespace"] for d in documents if d["kind"] == "LocalQueue")

    assert local_queues(alice) == ["llm"]
    assert local_queues(admin) == ["llm", "vision"]


def test_the_web_pages_show_another_teams_preemptor_to_nobody_else(preempted, tenants):  # noqa: F811
    browser = Client()
    browser.force_login(User.objects.get(username="alice"))
    pages = ["/", f"/workloads/{preempted['train']}/", "/queues/", f"/clusters/{tenants.name}/"]
    for page in pages:
        response = browser.get(page)
        assert response.status_code == 200
        assert "vision" not in response.content.decode(), page
    timeline = browser.get(f"/workloads/{preempted['train']}/").content.decode()
    assert ANONYMOUS in timeline

    whatif = browser.post(
        "/submit/",
        {"cluster": tenants.name, "namespace": "llm", "manifest": job("more"), "action": "whatif"},
    )
    assert whatif.status_code == 200
    assert "vision" not in whatif.content.decode()


def test_events_stored_before_the_rule_are_redacted_from_their_data(alice, tenants):  # noqa: F811
    record_event(
        "workload.preempted", at=timezone.now(), cluster=tenants.name, namespace="llm",
        object_key="Job/llm/old-train", workload="job-old-train-0a1b2", **OLD_PREEMPTED,
    )  # fmt: skip

    event = preemption(events_of(alice))

    assert event["message"] == (
        "preempted by another team's workload (workload hidden, priority 100): InClusterQueue"
    )
    assert event["data"]["preemptor"] == event["data"]["preemptor_object"] == ""
    assert "old-serve" not in json.dumps(event)


def test_a_preemption_within_a_team_still_names_the_preemptor(alice):  # noqa: F811
    submit(alice, job(name="llm-train", pods=3), "llm")
    submit(alice, deployment("chat"), "llm")

    event = preemption(events_of(alice))

    assert "Deployment/llm/chat" in event["message"]
    assert event["data"]["preemptor_object"] == "Deployment/llm/chat"
    assert "preemptor_hidden" not in event["data"]


def write_preemptions(cluster):
    with transaction.atomic():
        new = record_event(
            "workload.preempted", at=timezone.now(), cluster=cluster, namespace="llm",
            object_key="Job/llm/llm-train", message=f"preempted by {PREEMPTOR} (...)",
            reason="InClusterQueue", preemptor="pod-vision-serve-9z8y7",
            preemptor_object=PREEMPTOR, preemptor_namespace="vision", preemptor_priority=100,
            message_for_other_teams=ANONYMOUS,
        )  # fmt: skip
        old = record_event(
            "workload.preempted", at=timezone.now(), cluster=cluster, namespace="llm",
            object_key="Job/llm/old-train", **OLD_PREEMPTED,
        )  # fmt: skip
    return new.seq, old.seq


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("short_lived_connections")
async def test_the_websocket_stream_sends_the_redacted_event(settings):
    settings.ACCELPLANE_EVENTS_POLL_SECONDS = 0.05
    await database_sync_to_async(teams.ensure_team)(
        "llm", namespaces=["llm"], members=[("alice", "submitter")]
    )
    await database_sync_to_async(teams.ensure_team)("vision", namespaces=["vision"])
    seqs = await database_sync_to_async(write_preemptions)("llm-cluster")
    user = await database_sync_to_async(User.objects.get)(username="alice")

    communicator, connected, _ = await connect(user)
    assert connected
    events, _ = await receive_until_caught_up(communicator)
    await communicator.disconnect()

    assert [e["seq"] for e in events] == list(seqs)
    assert events[0]["message"] == ANONYMOUS
    assert "priority 100" in events[1]["message"]
    assert "vision" not in json.dumps(events)
