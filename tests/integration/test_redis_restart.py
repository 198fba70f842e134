"""Redis restarted while browsers follow /ws/events/: every client ends up with every committed
event exactly once, in sequence order, and the web server keeps answering throughout.

The clients behave as web/static/web/live.js does: on a closed socket they reconnect with
?after= the last sequence number they saw."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from events.models import Event
from events.services import record_event
from tests.integration.servers import PrivateRedis, web_server
from tests.integration.workers import worker_database_url

pytestmark = pytest.mark.django_db(transaction=True)

CLIENTS = 5
BATCH = 10  # events committed before, during and after the outage
DELIVERED_WITHIN = 20.0  # seconds: the database poll (1 s) plus reconnects


@pytest.fixture
def redis(tmp_path, settings):
    server = PrivateRedis(tmp_path)
    server.start()
    # Events this test commits are published on the private Redis too.
    layer = settings.CHANNEL_LAYERS["default"]
    settings.CHANNEL_LAYERS = {"default": {**layer, "CONFIG": {"hosts": [server.url]}}}
    yield server
    server.stop()


@pytest.fixture
def session_cookie():
    client = Client()
    client.force_login(User.objects.create_user("root", is_staff=True))
    return client.cookies["sessionid"].value


async def in_thread(work):
    """ORM work off the event loop, on a connection closed (returned) when it is done."""

    def run():
        try:
            return work()
        finally:
            connection.close()

    return await asyncio.to_thread(run)


def commit_events(label: str):
    def commit() -> list[int]:
        seqs = []
        for i in range(BATCH):
            with transaction.atomic():
                event = record_event(
                    "workload.admitted", at=timezone.now(), message=f"{label} {i}", namespace="llm"
                )
            seqs.append(event.seq)  # given once the commit numbered it
        return seqs

    return in_thread(commit)


class Browser:
    """A /ws/events/ client that reconnects after its last sequence number, as live.js does."""

    def __init__(self, port: int, cookie: str):
        self.url = f"http://127.0.0.1:{port}/ws/events/"
        self.headers = {"Origin": f"http://127.0.0.1:{port}", "Cookie": f"sessionid={cookie}"}
        self.seqs: list[int] = []
        self.connects = 0
        self.caught_up = asyncio.Event()

    async def follow(self) -> None:
        async with aiohttp.ClientSession() as http:
            while True:
                after = self.seqs[-1] if self.seqs else 0
                try:
                    async with http.ws_connect(
                        f"{self.url}?after={after}", headers=self.headers
                    ) as socket:
                        self.connects += 1
                        async for message in socket:
                            if message.type != aiohttp.WSMsgType.TEXT:
                                break
                            body = json.loads(message.data)
                            if body["type"] == "caught_up":
                                self.caught_up.set()
                            elif body["type"] == "event":
                                self.seqs.append(body["event"]["seq"])
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)


async def wait_until(condition, timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if condition():
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"{what} within {timeout:.0f} s")


def test_browsers_miss_nothing_while_redis_restarts(redis, session_cookie, tmp_path):
    env = {
        "DATABASE_URL": worker_database_url(),
        "REDIS_URL": redis.url,
        "ACCELPLANE_EVENTS_POLL_SECONDS": "1",
    }
    with web_server(env, tmp_path / "sockets.log") as port:  # make stack's sockets server
        asyncio.run(outage(port, redis, session_cookie))


async def outage(port: int, redis: PrivateRedis, cookie: str) -> None:
    browsers = [Browser(port, cookie) for _ in range(CLIENTS)]
    following = [asyncio.create_task(b.follow()) for b in browsers]
    try:
        for browser in browsers:
            await asyncio.wait_for(browser.caught_up.wait(), timeout=DELIVERED_WITHIN)
        committed = await commit_events("before")

        redis.stop()
        committed += await commit_events("during")
        schema = f"http://127.0.0.1:{port}/api/schema/"
        async with aiohttp.ClientSession() as http, http.get(schema) as response:
            assert response.status == 200  # the web server answers without Redis
        redis.start()
        committed += await commit_events("after")

        await wait_until(
            lambda: all(b.seqs[-len(committed) :] == committed for b in browsers),
            DELIVERED_WITHIN,
            "every browser received every event",
        )
        everything = await in_thread(
            lambda: list(Event.objects.order_by("seq").values_list("seq", flat=True))
        )
        for browser in browsers:
            # Exactly once, in order: nothing repeated across reconnects, nothing skipped.
            assert browser.seqs == everything
    finally:
        for task in following:
            task.cancel()
        await asyncio.gather(*following, return_exceptions=True)
