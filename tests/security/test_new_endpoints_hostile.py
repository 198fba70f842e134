"""Hostile input on the endpoints and pages of issues 14, 16 and 17: the event log's filters
and cursors, Kueue objects and their adoption, Kueue's Configuration, and importing a GKE
cluster. Each refusal is a 4xx naming the field; one team's filters never find, count or
quote another team's events; project and location never reshape the GKE request."""

# ruff: noqa: F811  (the API tests' fixtures, imported, are the tests' arguments)
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from clusters import services as cluster_services
from clusters.models import Cluster
from events.models import Event
from events.services import record_event
from tests.api.conftest import admin, alice, bob, tenants  # noqa: F401 (fixtures)
from tests.api.test_workloads import post_manifests
from tests.security.test_bounds import laughs
from tests.support import job
from workloads.models import ClusterQueue, Configuration, LocalQueue

pytestmark = pytest.mark.django_db

CONFIG = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"


def signed_in(username):
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


# The event log: cursors, limits and filters.


@pytest.mark.parametrize(
    "before", ["%C2%B2", "%EF%BC%91", "9" * 5000, "1" * 20, "-1", "0", "1e3", "1.0"]
)
def test_an_events_page_cursor_that_is_not_a_sequence_number_is_a_400(tenants, before):
    response = signed_in("alice").get(f"/events/?before={before}")

    assert response.status_code == 400
    assert response.context["invalid"] == "before"
    assert "is not an event sequence number" in response.context["problem"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("after=-1", "after"),
        ("after=1e30", "after"),
        (f"after={10**30}", "after"),
        (f"after={'9' * 5000}", "after"),
        ("after=%C2%B2", "after"),
        ("after=1&after=x", "after"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        (f"limit={10**30}", "limit"),
    ],
)
def test_event_api_cursors_and_limits_out_of_bounds_are_a_400_naming_them(alice, query, field):
    response = alice.get(f"/api/v1/events?{query}")

    assert response.status_code == 400
    assert list(response.json()) == [field]


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("cluster", "a" * 64),
        ("cluster", "../llm-cluster"),
        ("namespace", "Vision"),
        ("namespace", "l%C5%82m"),
        ("kind", "Job/vision"),
        ("type", "workload." + "a" * 60),
        ("type", "audit.*"),
        ("workload", "w" * 254),
    ],
)
def test_event_filters_the_log_cannot_hold_are_a_400_naming_them(alice, param, value):
    api = alice.get(f"/api/v1/events?{param}={value}")
    page = signed_in("alice").get(f"/events/?{param}={value}")

    assert api.status_code == 400
    assert list(api.json()) == [param]
    assert api.json()[param][0].startswith(param)  # the message names it too
    assert (page.status_code, page.context["invalid"]) == (400, param)


def test_a_repeated_filter_is_checked_as_it_is_applied(alice):
    """The value checked is the value used: a good first one does not let a bad last one by."""
    response = alice.get("/api/v1/events?namespace=llm&namespace=-bad")

    assert response.status_code == 400
    assert "'-bad'" in response.json()["namespace"][0]


@pytest.fixture
def other_teams_work(alice, bob):
    """Bob's job in namespace vision, with its events; alice's in llm."""
    for client, namespace, name in ((bob, "vision", "vision-secret"), (alice, "llm", "mine")):
        text = job(name=name, gpus=0)
        if namespace == "vision":
            text = text.replace("team-llm", "team-vision")
        assert post_manifests(client, text, namespace=namespace).status_code == 201
    assert Event.objects.filter(namespace="vision").exists()


@pytest.mark.parametrize(
    "query",
    [
        "namespace=vision",
        "workload=job-vision-secret",
        "namespace=vision&kind=Job",
        "namespace=vision&type=workload.created",
        "type=audit.created",
    ],
)
def test_filters_naming_another_teams_objects_find_what_a_made_up_name_finds(
    alice, other_teams_work, query
):
    """Nothing, with the same answer as a namespace or workload that never existed: neither
    the events nor their count nor their messages tell alice that vision's exist."""
    made_up = query.replace("vision-secret", "never-was").replace("vision", "never-was")
    found = alice.get(f"/api/v1/events?{query}&limit=1000").json()
    page = signed_in("alice").get(f"/events/?{query}")

    assert found == alice.get(f"/api/v1/events?{made_up}&limit=1000").json()
    assert found["events"] == []
    assert (page.status_code, page.context["events"], page.context["has_older"]) == (
        200,
        [],
        False,
    )


def test_the_type_filter_offers_no_type_only_another_team_had(alice, other_teams_work):
    """The datalist of types is built from the events the caller may see: a preemption in
    vision's namespace is not hinted to alice, while an admin, who sees it, is offered it."""
    record_event(
        "workload.preempted",
        at=timezone.now(),
        message="preempted to make room",
        cluster="llm-cluster",
        namespace="vision",
        workload="job-vision-secret",
    )
    offered = list(signed_in("alice").get("/events/").context["types"])
    assert "workload.submitted" in offered  # her own job's
    assert "workload.preempted" not in offered
    root = User.objects.create_user("root-types", is_staff=True)
    page = Client()
    page.force_login(root)
    assert "workload.preempted" in list(page.get("/events/").context["types"])


def test_the_audit_log_is_for_platform_admins_only(alice, other_teams_work):
    assert signed_in("alice").get("/events/audit/").status_code == 403
    every = alice.get("/api/v1/events?limit=1000").json()["events"]
    assert not [e for e in every if e["kind"].startswith("audit.") or e["namespace"] == "vision"]


# Kueue objects: who edits them, what they take, and objects managed elsewhere.


def test_a_team_member_cannot_apply_or_adopt_kueue_objects(alice):
    spec = ClusterQueue.objects.get(name="gpu-queue").spec
    ClusterQueue.objects.filter(name="gpu-queue").update(managed_elsewhere=True)
    queue = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: gpu-queue}\n"

    applied = post_manifests(alice, queue, path="/api/v1/clusterqueues")
    adopted = alice.post("/api/v1/clusterqueues/gpu-queue/adopt")

    assert (applied.status_code, adopted.status_code) == (403, 403)
    row = ClusterQueue.objects.get(name="gpu-queue")
    assert (row.managed_elsewhere, row.spec) == (True, spec)


def test_another_teams_local_queue_is_not_found_for_a_team_member(bob):
    assert LocalQueue.objects.filter(namespace="llm", name="team-llm").exists()
    assert bob.get("/api/v1/localqueues/llm.team-llm").status_code == 404
    assert bob.get("/api/v1/localqueues/vision.team-vision").status_code == 200


def test_applying_over_an_object_managed_elsewhere_is_a_409_until_adopted(admin):
    ClusterQueue.objects.filter(name="gpu-queue").update(managed_elsewhere=True)
    queue = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\n"
        "metadata: {name: gpu-queue}\nspec: {namespaceSelector: {}}\n"
    )

    refused = post_manifests(admin, queue, path="/api/v1/clusterqueues")
    deleted = admin.delete("/api/v1/clusterqueues/gpu-queue")

    assert (refused.status_code, deleted.status_code) == (409, 409)
    assert "must adopt it" in refused.json()["detail"]
    assert ClusterQueue.objects.get(name="gpu-queue").managed_elsewhere


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n"
            "metadata: {name: q, namespace: llm}\nspec: {clusterQueue: gpu-queue}\n",
            "this endpoint takes ClusterQueue objects",
        ),
        (
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n  name: q\n"
            "spec:\n" + laughs(9),
            "expand to more than",
        ),
    ],
)
def test_a_kueue_endpoint_refuses_other_kinds_and_yaml_bombs(admin, text, names):
    before = ClusterQueue.objects.count()
    response = post_manifests(admin, text, path="/api/v1/clusterqueues")

    assert response.status_code == 400
    assert names in response.json()["detail"]
    assert ClusterQueue.objects.count() == before


# Kueue's Configuration.


@pytest.mark.parametrize(
    ("body", "path", "problem"),
    [
        ("waitForPodsReady: {timeout: '" + "1" * 200_000 + "x'}", "timeout", "longer than 64"),
        ("waitForPodsReady: {timeout: -5m}", "timeout", "must not be negative"),
        ("waitForPodsReady: {timeout: 9000h}", "timeout", "at most 8784h"),
        ("admissionFairSharing: {usageHalfLifeTime: 1e400h}", "usageHalfLifeTime", "not a dur"),
        (
            "waitForPodsReady: {requeuingStrategy: {backoffBaseSeconds: " + "9" * 30 + "}}",
            "backoffBaseSeconds",
            "",
        ),
        (
            "waitForPodsReady: {requeuingStrategy: {backoffLimitCount: -1}}",
            "backoffLimitCount",
            "at least 0",
        ),
        ("admissionFairSharing: {resourceWeights: {cpu: -1}}", "resourceWeights", "negative"),
    ],
)
def test_a_configuration_out_of_bounds_is_a_400_naming_the_field(admin, body, path, problem):
    response = post_manifests(admin, CONFIG + body, path="/api/v1/configurations")

    assert response.status_code == 400, response.content
    assert path in response.json()["path"]
    assert problem in response.json()["detail"]
    assert not Configuration.objects.exists()


def test_a_long_simulated_duration_annotation_is_refused_before_it_is_parsed(alice):
    """The annotation a team sets: a run of digits parsed as a duration is quadratic."""
    text = job(gpus=0, step_time="1" * 200_000 + "x")
    response = post_manifests(alice, text, namespace="llm")

    assert response.status_code == 400
    assert response.json()["path"] == "simulation.step-time"
    assert response.json()["detail"].endswith("is not a duration or a whole number")
    # The value is quoted, not echoed whole: the answer and the logged refusal stay small.
    assert len(response.content) < 2_000
    rejected = Event.objects.get(kind="workload.rejected")
    assert len(rejected.message) < 1_000


# Importing a GKE cluster: project and location stay one segment of GKE's resource name.

TRICKS = [
    ("project", "acme-ml/locations/us-central1/clusters/other", True),
    ("project", "..", True),
    ("project", "acme-ml%2F..%2Fother", True),
    ("project", "acme-ml?alt=media#", True),
    ("project", "@metadata.google.internal", True),
    ("project", "a" * 129, True),
    ("location", "us-central1/../../v2", True),
    ("location", ".", True),
    ("location", "us-central1%23", True),
    ("project", "acme-ml/../other", False),  # a cluster to create: its worker would ask GKE
    ("location", "..", False),
]


@pytest.fixture
def no_gke_call(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the GKE API was called")

    monkeypatch.setattr(cluster_services, "provider_with", refuse)


@pytest.mark.parametrize(("field", "value", "imported"), TRICKS)
def test_a_project_or_location_that_is_not_one_gke_name_is_a_400(
    staff_api, no_gke_call, field, value, imported
):
    body = {"name": "ml-prod", "provider": "gke", "project": "acme-ml", "location": "us-central1"}
    response = staff_api.post(
        "/api/v1/clusters", {**body, field: value, "import": imported}, format="json"
    )

    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]
    assert not Cluster.objects.exists()


def test_the_import_page_refuses_them_too(db, no_gke_call):
    client = Client()
    client.force_login(User.objects.create_user("root", is_staff=True))
    response = client.post(
        "/platform/clusters/import/", {"project": "acme-ml/../x", "location": "us-central1"}
    )

    assert response.status_code == 400
    assert "is not a Google Cloud project id" in response.context["form"].errors["project"][0]


@pytest.mark.parametrize(
    ("project", "location"),
    [("acme-ml", "us-central1"), ("example.com:acme-ml", "us-east5-a"), ("123456789012", "eu")],
)
def test_real_project_ids_and_locations_reach_the_provider(
    staff_api, monkeypatch, project, location
):
    asked = []

    def listing(project, location, sealed_key=""):
        asked.append((project, location))
        return []

    monkeypatch.setattr(cluster_services, "importable_clusters", listing)
    body = {"import": True, "name": "ml-prod", "provider": "gke"}
    response = staff_api.post(
        "/api/v1/clusters", {**body, "project": project, "location": location}, format="json"
    )

    assert response.status_code == 400  # GKE lists no such cluster
    assert asked == [(project, location)]
