"""/ws/events/ on the Redis channel layer: events another process commits reach the socket."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.contrib.auth.models import User

from api.consumers import EventsConsumer
from tests.integration.workers import ROOT, worker_database_url

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.asyncio,
    pytest.mark.usefixtures("short_lived_connections"),
]

WRITE_EVENT = """
from django.db import transaction
from django.utils import timezone
from events.services import record_event
with transaction.atomic():
    record_event("workload.admitted", at=timezone.now(), message="from another process",
                 namespace="llm")
"""


def write_from_another_process():
    env = {**os.environ, "DATABASE_URL": worker_database_url()}
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", WRITE_EVENT], cwd=ROOT, env=env, check=True
    )


@pytest.fixture
def admin():
    return User.objects.create_user("root", is_staff=True)


async def test_an_event_committed_by_another_process_arrives_over_redis(settings, admin):
    assert isinstance(get_channel_layer(), RedisPubSubChannelLayer)
    settings.ACCELPLANE_EVENTS_POLL_SECONDS = 600  # so only the channel layer can deliver it
    communicator = WebsocketCommunicator(EventsConsumer.as_asgi(), "/ws/events/?after=0")
    communicator.scope["user"] = admin
    connected, _ = await communicator.connect()
    assert connected
    assert (await communicator.receive_json_from(timeout=5))["type"] == "caught_up"
    await asyncio.to_thread(write_from_another_process)
    message = await communicator.receive_json_from(timeout=10)
    assert message["event"]["message"] == "from another process"
    await communicator.disconnect()
