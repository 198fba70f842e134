"""Events reach the Redis channel layer once their transaction commits."""

from __future__ import annotations

import asyncio
import os
from urllib.parse import urlsplit

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.db import transaction
from django.utils import timezone

from controlplane.settings import channel_layer
from events.services import EVENTS_GROUP, record_event

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.asyncio,
    pytest.mark.usefixtures("short_lived_connections"),
]


def commit_event():
    with transaction.atomic():
        return record_event(
            "node_pool.created",
            at=timezone.now(),
            message="node pool gpupool is running with 3 nodes",
            cluster="llm-cluster",
            object_key="NodePool/llm-cluster/gpupool",
        )


async def test_an_event_committed_in_a_transaction_arrives_on_the_events_group():
    # One process-wide subscription per group: Redis carries each event once per process.
    layer = get_channel_layer()
    assert isinstance(layer, RedisPubSubChannelLayer)
    channel = await layer.new_channel()
    await layer.group_add(EVENTS_GROUP, channel)
    try:
        event = await sync_to_async(commit_event, thread_sensitive=False)()
        message = await asyncio.wait_for(layer.receive(channel), 5.0)
    finally:
        await layer.group_discard(EVENTS_GROUP, channel)

    assert message["type"] == "events.created"
    (published,) = message["events"]
    assert published["seq"] == event.seq
    assert published["object"] == "NodePool/llm-cluster/gpupool"


def redis_database(number: int) -> str:
    return urlsplit(os.environ["REDIS_URL"])._replace(path=f"/{number}").geturl()


async def test_deployments_on_other_redis_databases_never_see_each_others_events():
    """Redis's publish/subscribe is one namespace for the whole server, whatever the database."""
    ours, theirs, ours_again = (
        RedisPubSubChannelLayer(**channel_layer(redis_database(n))["CONFIG"]) for n in (7, 8, 7)
    )
    channel = await ours.new_channel()
    await ours.group_add(EVENTS_GROUP, channel)
    try:
        await theirs.group_send(EVENTS_GROUP, {"type": "event.created", "from": "theirs"})
        await ours_again.group_send(EVENTS_GROUP, {"type": "event.created", "from": "ours"})
        message = await asyncio.wait_for(ours.receive(channel), 5.0)
    finally:
        await ours.group_discard(EVENTS_GROUP, channel)
        for layer in (ours, theirs, ours_again):
            await layer.flush()

    assert message["from"] == "ours"
