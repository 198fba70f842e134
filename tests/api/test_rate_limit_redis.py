"""The rate limit on a real Redis (a private redis-server) through controlplane/cache.py's
backend: one redis-py client and one connection serve every request of a web process, the
counters still add up across requests, threads and web processes, stay two small integers per
token, and the client outlives a Redis restart."""

from __future__ import annotations

import contextvars
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.cache import caches
from django.test import AsyncClient

from api.throttling import TokenRateThrottle
from controlplane.cache import RedisCache
from teams import services as teams
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

    # Reads and writes of the one server go through one client, whichever backend asks.
    client = redis_cache._cache.get_client()
    assert redis_cache._cache.get_client(write=True) is client
    assert RedisCache(settings.CACHES["default"]["LOCATION"], {})._cache.get_client() is client
    # The counters are in Redis: another web process's backend sees alice's three requests
    # (in this minute's counter, or the last one's if a minute began meanwhile).
    elsewhere = RedisCache(settings.CACHES["default"]["LOCATION"], {})
    tokens = {t.user.username: t.pk for t in ApiToken.objects.select_related("user")}
    minute = int(time.time() // 60)

    def counted(user):
        keys = [f"throttle_token_token-{tokens[user]}:{m}" for m in (minute - 1, minute)]
        return sum(elsewhere.get_many(keys).values())

    assert counted("alice") == 3
    assert counted("bob") == 1


def test_the_limit_lets_requests_through_while_redis_is_down_and_counts_again_after(
    redis_server, redis_cache, alice, settings, caplog
):
    settings.ACCELPLANE_API_RATE = "2/min"
    assert alice.get("/api/v1/me").status_code == 200
    redis_server.stop()
    assert [alice.get("/api/v1/me").status_code for _ in range(3)] == [200, 200, 200]
    assert caplog.text.count("rate limit not applied") == 3
    redis_server.start()  # without persistence: the counters start again from none
    assert [alice.get("/api/v1/me").status_code for _ in range(3)] == [200, 200, 429]


@pytest.mark.django_db(transaction=True)
def test_requests_through_the_asgi_application_share_one_connection(
    redis_server, redis_cache, tenants, settings
):
    # Under ASGI each request runs in a context of its own, with a cache backend of its own:
    # each used to open a connection to Redis of its own for its rate limit.
    settings.ACCELPLANE_API_RATE = "1000/min"
    _, token = teams.issue_token(User.objects.get(username="alice"))
    client, auth = AsyncClient(), {"authorization": f"Bearer {token}"}
    server = redis.Redis.from_url(redis_server.url)
    before = server.info("stats")["total_connections_received"]
    for _ in range(10):
        # In a context of its own, as a web server runs each request: with no cache backend yet.
        response = contextvars.Context().run(async_to_sync(client.get), "/api/v1/me", headers=auth)
        assert response.status_code == 200, response.content
    # The first request's connection at most, whatever the number of requests.
    assert server.info("stats")["total_connections_received"] - before <= 1


class Clock:
    def __init__(self, at: float):
        self.at = at

    def __call__(self) -> float:
        return self.at


def test_concurrent_requests_of_one_token_never_pass_the_limit(redis_cache, settings):
    settings.ACCELPLANE_API_RATE = "50/min"
    request = SimpleNamespace(auth=ApiToken(pk=7))
    clock = Clock(1_800_000_030.0)  # halfway through a minute, for every thread
    start = threading.Barrier(8)

    def ask(_):
        start.wait()
        allowed = 0
        for _ in range(25):
            throttle = TokenRateThrottle()  # on this thread's cache backend, as in a web server
            throttle.timer = clock
            allowed += throttle.allow_request(request, None)
        return allowed

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(ask, range(8))) == 50
    assert redis_cache.get(f"throttle_token_token-7:{int(clock.at // 60)}") == 50


def test_a_token_holds_two_small_integers_whatever_the_rate(redis_cache, alice, settings):
    settings.ACCELPLANE_API_RATE = "100000/min"
    for _ in range(200):
        assert alice.get("/api/v1/me").status_code == 200
    client = redis_cache._cache.get_client()
    keys = client.keys("*throttle*")
    assert 1 <= len(keys) <= 2  # this minute's counter, and the last one's if a minute began
    assert sum(int(client.get(key)) for key in keys) == 200
    assert all(client.type(key) == b"string" and client.strlen(key) <= 3 for key in keys)
    assert all(0 < client.ttl(key) <= 120 for key in keys)
