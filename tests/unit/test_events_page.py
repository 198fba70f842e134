"""/events/: the event log filtered, paged by sequence number, audit apart; and the same
filters, validated the same way, on GET /api/v1/events."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User

from events.audit import record_audit
from events.models import Event
from events.services import record_event
from teams import services as teams
from tests.api.conftest import client_for
from tests.support import at, deployment, job
from web.views.events import PAGE_SIZE
from workloads import services


@pytest.fixture
def log(gpu_queues):
    """llm's Job and Deployment applied and admitted; team vision's namespace has nothing."""
    teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
    teams.ensure_team("vision", namespaces=["vision"], members=[("viv", "viewer")])
    root = User.objects.create_user("root", is_staff=True)
    for name, text in (("finetune.yaml", job()), ("chat.yaml", deployment("chat"))):
        services.apply(gpu_queues, text, source=name, now=at(), namespace="llm", actor=root)
    record_audit(root, "configured", "ClusterQueue/gpu-queue", cluster=gpu_queues.name)
    return root


def seqs(response):
    return [int(s) for s in re.findall(r'<li data-seq="(\d+)"', response.content.decode())]


def kinds(response):
    return set(Event.objects.filter(seq__in=seqs(response)).values_list("kind", flat=True))


@pytest.fixture
def admin(log, client):
    client.force_login(log)
    return client


def test_the_log_is_newest_first_and_leaves_audit_events_to_their_own_page(admin):
    response = admin.get("/events/")

    shown = seqs(response)
    assert shown == sorted(shown, reverse=True)
    everything = Event.objects.exclude(kind__startswith="audit.").values_list("seq", flat=True)
    assert set(shown) == set(everything)
    audit = admin.get("/events/audit/")
    assert kinds(audit) == {"audit.configured"}
    assert 'data-audit="only"' in audit.content.decode()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("type=workload.admitted", lambda e: e.kind == "workload.admitted"),
        ("kind=Job", lambda e: e.object_key.startswith("Job/")),
        ("namespace=llm", lambda e: e.namespace == "llm"),
        ("cluster=llm-cluster&kind=Deployment", lambda e: e.object_key.startswith("Deployment/")),
    ],
)
def test_the_filters_keep_the_matching_events(admin, query, expected):
    response = admin.get(f"/events/?{query}")

    assert response.status_code == 200
    matching = [e.seq for e in Event.objects.exclude(kind__startswith="audit.") if expected(e)]
    assert matching
    assert sorted(seqs(response)) == sorted(matching)


def test_a_workload_filter_shows_that_workloads_events(admin):
    name = Event.objects.exclude(workload_name="").values_list("workload_name", flat=True)[0]

    shown = seqs(admin.get(f"/events/?workload={name}"))

    assert shown
    assert set(Event.objects.filter(seq__in=shown).values_list("workload_name", flat=True)) == {
        name
    }


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("namespace=Not_A_Namespace", "namespace &#x27;Not_A_Namespace&#x27; is not a namespace"),
        ("type=DROP TABLE", "type &#x27;DROP TABLE&#x27; is not an event type"),
        ("kind=job", "kind &#x27;job&#x27; is not an object kind"),
        ("workload=" + "w" * 254, "is not a Kueue workload name"),
        ("cluster=" + "c" * 64, "is not a cluster name"),
        ("before=-3", "before &#x27;-3&#x27; is not an event sequence number"),
        ("before=99999999999999999999", "is not an event sequence number"),
    ],
)
def test_a_bad_filter_is_explained_not_a_server_error(admin, query, problem):
    response = admin.get(f"/events/?{query}")

    assert response.status_code == 400
    assert problem in response.content.decode()
    assert seqs(response) == []


def test_older_events_are_paged_by_sequence_number(admin):
    for i in range(PAGE_SIZE + 5):
        record_event("node.ready", at=at(seconds=i), cluster="llm-cluster", message=f"node {i}")

    first = admin.get("/events/")
    newest = list(
        Event.objects.exclude(kind__startswith="audit.")
        .order_by("-seq")
        .values_list("seq", flat=True)
    )
    assert seqs(first) == newest[:PAGE_SIZE]
    older = re.search(r'<a data-older href="\?([^"]+)"', first.content.decode())
    assert older.group(1) == f"before={newest[PAGE_SIZE - 1]}"
    assert "data-feed" in first.content.decode()  # the first page takes new events live

    second = admin.get(f"/events/?{older.group(1)}")
    assert seqs(second) == newest[PAGE_SIZE : 2 * PAGE_SIZE]
    page = second.content.decode()
    assert "data-feed" not in page  # an older page stays as it was
    assert 'href="?">Newest</a>' in page


def test_the_cursor_keeps_the_filters(admin):
    for i in range(PAGE_SIZE + 1):
        record_event("node.ready", at=at(seconds=i), cluster="llm-cluster", message=f"node {i}")

    page = admin.get("/events/?type=node.ready&cluster=llm-cluster").content.decode()

    assert re.search(
        r'data-older href="\?cluster=llm-cluster&amp;type=node.ready&amp;before=\d+"', page
    )
    assert 'data-where-type="node.ready"' in page


def test_a_team_member_sees_the_events_the_api_shows_them(log, client):
    client.force_login(User.objects.get(username="viv"))
    api = client_for(User.objects.get(username="viv"))
    from_api = {e["seq"] for e in api.get("/api/v1/events?limit=1000").json()["events"]}

    page = client.get("/events/")

    assert set(seqs(page)) == from_api
    assert not Event.objects.filter(seq__in=seqs(page), namespace="llm").exists()
    assert seqs(client.get("/events/?namespace=llm")) == []
    assert client.get("/events/audit/").status_code == 403


def test_the_api_takes_the_same_filters_and_refuses_the_same_values(log):
    api = client_for(log)

    jobs = api.get("/api/v1/events?kind=Job&limit=1000").json()["events"]
    refused = api.get("/api/v1/events?namespace=Not_A_Namespace")

    assert jobs
    assert all(e["object"].startswith("Job/") for e in jobs)
    assert refused.status_code == 400
    assert "namespace 'Not_A_Namespace' is not a namespace" in refused.content.decode()
