"""The rate limit on a real Redis (a private redis-server) through controlplane/cache.py's
backend: one redis-py client serves every cache call, the counters still add up across requests
and web processes, and the client outlives a Redis restart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import caches

from controlplane.cache import RedisCache
from teams.models import ApiToken
from tests.integration.servers import PrivateRedis

BACKEND = "controlplane.cache.RedisCache"


@pytest.fixture
def redis_server(tmp_path):
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_cache(redis_server, settings):
    settings.CACHES = {"default": {"BACKEND": BACKEND, "LOCATION": redis_server.url}}
    return caches["default"]


def test_the_full_stack_settings_use_the_backend(tmp_path):
    # Loading settings connects to nothing; one machine's keys go to tmp_path, not var/.
    env = os.environ | {"REDIS_URL": "redis://127.0.0.1:6379/0"}
    env["ACCELPLANE_VAR_DIR"] = str(tmp_path)
    code = "from controlplane import settings; print(settings.CACHES['default']['BACKEND'])"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.stdout.strip() == BACKEND, result.stderr


def test_one_client_serves_every_call_and_the_limit_holds(redis_cache, alice, bob, settings):
    settings.ACCELPLANE_API_RATE = "3/min"
    assert isinstance(redis_cache, RedisCache)
    assert [alice.get("/api/v1/me").status_code for _ in range(3)] == [200, 200, 200]
    limited = alice.get("/api/v1/me")
    assert limited.status_code == 429
    assert int(limited["Retry-After"]) > 0
    assert bob.get("/api/v1/me").status_code == 200

    # Reads and writes of the one server went through one client, made once.
    clients = redis_cache._cache._clients
    assert len(clients) == 1
    assert redis_cache._cache.get_client(write=True) is redis_cache._cache.get_client()
    # The counters are in Redis: another web process's backend sees alice's three requests.
    elsewhere = RedisCache(settings.CACHES["default"]["LOCATION"], {})
    tokens = {t.user.username: t.pk for t in ApiToken.objects.select_related("user")}
    assert len(elsewhere.get(f"throttle_token_token-{tokens['alice']}")) == 3
    assert len(elsewhere.get(f"throttle_token_token-{tokens['bob']}")) == 1


def test_the_limit_lets_requests_through_while_redis_is_down_and_counts_again_after(
    redis_server, redis_cache, alice, settings
):
    settings.ACCELPLANE_API_RATE = "2/min"
    assert alice.get("/api/v1/me").status_code == 200
    redis_server.stop()
    assert [alice.get("/api/v1/me").status_code for _ in range(3)] == [200, 200, 200]
    redis_server.start()  # without persistence: the counters start again from none
    assert [alice.get("/api/v1/me").status_code for _ in range(3)] == [200, 200, 429]
    assert len(redis_cache._cache._clients) == 1
