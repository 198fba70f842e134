"""No leak between teams: another team's workloads answer 404 everywhere, as if absent."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from teams import services as teams
from tests.api.test_workloads import post_manifests
from tests.support import deployment, job, row_counts

pytestmark = pytest.mark.django_db

# (method, path under /api/v1/workloads/{id}, body) for every per-object endpoint.
OBJECT_ENDPOINTS = [
    ("get", "", None),
    ("delete", "", None),
    ("post", "/scale", {"replicas": 2}),
    ("get", "/events", None),
    ("get", "/checkpoints", None),
    ("post", "/checkpoints", {"step": 10}),
    ("get", "/explain", None),
]


@pytest.fixture
def submitted(alice, bob):
    """Each team's Deployment and Job: {team: {kind: id}}."""
    ids = {}
    for team, client, namespace in (("llm", alice, "llm"), ("vision", bob, "vision")):
        text = (
            deployment(queue=f"team-{team}")
            + "---\n"
            + job(name=f"{team}-train").replace("team-llm", f"team-{team}")
        )
        response = post_manifests(client, text, namespace=namespace)
        assert response.status_code == 201, response.json()
        ids[team] = {o["kind"]: o["id"] for o in response.json()["objects"]}
    return ids


@pytest.mark.parametrize(("method", "suffix", "body"), OBJECT_ENDPOINTS)
@pytest.mark.parametrize("kind", ["Deployment", "Job"])
@pytest.mark.parametrize(("who", "other"), [("alice", "vision"), ("bob", "llm")])
def test_another_teams_object_is_not_found_on_every_endpoint(
    request, submitted, who, other, kind, method, suffix, body
):
    client = request.getfixturevalue(who)
    before = row_counts()
    url = f"/api/v1/workloads/{submitted[other][kind]}{suffix}"
    response = getattr(client, method)(url, body, format="json")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}
    assert row_counts() == before


def test_a_missing_object_answers_exactly_as_another_teams(alice, submitted):
    missing = alice.get("/api/v1/workloads/999999")
    foreign = alice.get(f"/api/v1/workloads/{submitted['vision']['Job']}")
    assert (missing.status_code, missing.json()) == (foreign.status_code, foreign.json())


@pytest.mark.parametrize(
    ("who", "mine", "theirs"), [("alice", "llm", "vision"), ("bob", "vision", "llm")]
)
def test_lists_and_the_event_log_show_only_the_callers_namespaces(
    request, submitted, who, mine, theirs
):
    client = request.getfixturevalue(who)
    listed = client.get("/api/v1/workloads").json()["results"]
    assert {o["namespace"] for o in listed} == {mine}
    assert client.get(f"/api/v1/workloads?namespace={theirs}").json()["count"] == 0
    events = client.get("/api/v1/events?limit=1000").json()["events"]
    assert {e["namespace"] for e in events} <= {mine, ""}
    assert any(e["namespace"] == mine for e in events)
    assert client.get(f"/api/v1/events?namespace={theirs}").json()["events"] == []
    queues = client.get("/api/v1/localqueues").json()["results"]
    assert {q["namespace"] for q in queues} == {mine}


@pytest.mark.parametrize(("who", "theirs"), [("alice", "vision"), ("bob", "llm")])
def test_nobody_submits_into_another_teams_namespace(request, submitted, who, theirs):
    client = request.getfixturevalue(who)
    before = row_counts()
    response = post_manifests(client, job(name="intruder"), namespace=theirs)
    assert response.status_code == 403
    assert theirs in response.json()["detail"]
    assert row_counts() == before
    whatif = post_manifests(client, job(name="intruder"), path="/api/v1/whatif", namespace=theirs)
    assert whatif.status_code == 403


def test_a_viewer_reads_but_cannot_change(carol, submitted):
    job_id = submitted["llm"]["Job"]
    assert carol.get(f"/api/v1/workloads/{job_id}").status_code == 200
    assert "checkpoint_token" not in carol.get(f"/api/v1/workloads/{job_id}").json()
    assert carol.delete(f"/api/v1/workloads/{job_id}").status_code == 403
    deployment_id = submitted["llm"]["Deployment"]
    scaled = carol.post(f"/api/v1/workloads/{deployment_id}/scale", {"replicas": 2}, format="json")
    assert scaled.status_code == 403
    assert post_manifests(carol, job(name="mine"), namespace="llm").status_code == 403


def test_a_token_reads_its_users_scope_with_it_as_the_user_alone_reads_it(tenants):
    """The namespaces and roles come in the token's statement: the same scope, for a member
    of two teams (submitter of one, viewer of the other), of a team without namespaces, and
    of no team."""
    teams.ensure_team("shared", namespaces=["shared-a", "shared-b"], members=[("bob", "viewer")])
    teams.ensure_team("empty", namespaces=[], members=[("dave", "submitter")])
    User.objects.create_user("erin")
    for name in ("alice", "bob", "carol", "dave", "erin"):
        user = User.objects.get(username=name)
        with_token = teams.authenticate(teams.issue_token(user)[1]).user
        assert teams.scope_of(with_token) == teams.scope_of(user), name

    bob = teams.authenticate(teams.issue_token(User.objects.get(username="bob"))[1]).user
    assert teams.scope_of(bob) == teams.Scope(
        False, frozenset({"vision", "shared-a", "shared-b"}), frozenset({"vision"})
    )
