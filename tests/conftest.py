"""Shared actors: a GPU cluster provisioned by the sim provider and the Kueue queues on it."""

from __future__ import annotations

import pytest

from clusters import services as cluster_services
from clusters.models import Cluster
from tests.support import GPU_QUEUES, T0
from workloads import services


@pytest.fixture
def cluster(db):
    """A running sim cluster with three g2-standard-24 nodes (2 L4 GPUs each)."""
    row = Cluster.objects.create(name="llm-cluster", status=Cluster.Status.RUNNING)
    cluster_services.provision_now(
        row, name="gpupool", machine_type="g2-standard-24", node_count=3, at=T0
    )
    return row


@pytest.fixture
def gpu_queues(cluster):
    """ResourceFlavor l4, ClusterQueue gpu-queue (6 GPUs), LocalQueue llm/team-llm, priorities."""
    services.apply(cluster, GPU_QUEUES, source="queues.yaml", now=T0)
    return cluster


@pytest.fixture
async def short_lived_connections():
    """Consumers read the database in asgiref's one thread for sync code, which outlives
    the test. Channels' test communicators turn close_old_connections off while a test
    awaits them, so that thread keeps the last connection it took (from the pool, or a
    persistent one with CONN_MAX_AGE) and the test database could not be dropped at the end
    of the run: closed in that thread after each test."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    settings_dict = connections["default"].settings_dict
    before = settings_dict["CONN_MAX_AGE"]
    settings_dict["CONN_MAX_AGE"] = 0
    yield
    settings_dict["CONN_MAX_AGE"] = before
    await sync_to_async(connections.close_all)()


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Rate-limit counters live in the cache; each test starts with none."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(scope="session")
def sa_key():
    """A Google service account key file's JSON (tests.support.service_account_key)."""
    from tests.support import service_account_key

    return service_account_key()


@pytest.fixture
def staff_api(db):
    """The REST API as a platform admin, by API token."""
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    from teams import services as teams

    _, token = teams.issue_token(User.objects.create_user("root", is_staff=True))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture(autouse=True)
def _verified_admission_cache(settings):
    """Every admission in the tests checks the in-memory queues against the database."""
    settings.ADMISSION_CACHE = True
    settings.ADMISSION_CACHE_VERIFY = True
