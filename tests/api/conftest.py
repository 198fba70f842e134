"""Two teams sharing the GPU queue, a viewer, a platform admin, and API clients for each."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from teams import services as teams
from tests.support import T0
from workloads import services

VISION_QUEUE = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-vision, namespace: vision}
spec: {clusterQueue: gpu-queue}
"""


def client_for(user: User) -> APIClient:
    _, token = teams.issue_token(user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def tenants(gpu_queues):
    """Team llm (alice submits, carol views) and team vision (bob submits), one cluster."""
    services.apply(gpu_queues, VISION_QUEUE, source="queues.yaml", now=T0)
    teams.ensure_team(
        "llm", namespaces=["llm"], members=[("alice", "submitter"), ("carol", "viewer")]
    )
    teams.ensure_team("vision", namespaces=["vision"], members=[("bob", "submitter")])
    return gpu_queues


@pytest.fixture
def alice_token(tenants) -> str:
    """An API token of alice, who submits to llm."""
    return teams.issue_token(User.objects.get(username="alice"))[1]


@pytest.fixture
def alice(tenants):
    return client_for(User.objects.get(username="alice"))


@pytest.fixture
def bob(tenants):
    return client_for(User.objects.get(username="bob"))


@pytest.fixture
def carol(tenants):
    return client_for(User.objects.get(username="carol"))


@pytest.fixture
def admin(tenants):
    return client_for(User.objects.create_user("root", is_staff=True))


class Clock:
    """The API's clock, set by the test, so that simulated training has a known progress."""

    def __init__(self, start):
        self.at = start

    def __call__(self):
        return self.at


@pytest.fixture
def clock(monkeypatch):
    fixed = Clock(T0)
    for module in ("api.workloads", "api.platform"):
        monkeypatch.setattr(f"{module}.now", fixed)
    return fixed
