"""Events reach the Redis channel layer once their transaction commits."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.db import transaction
from django.utils import timezone

from events.services import EVENTS_GROUP, record_event

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def listener():
    """A channel in the `events` group of the Redis channel layer."""
    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(EVENTS_GROUP, channel)
    yield layer, channel
    async_to_sync(layer.group_discard)(EVENTS_GROUP, channel)


def receive(listener, timeout=5.0):
    layer, channel = listener

    async def first():
        return await asyncio.wait_for(layer.receive(channel), timeout)

    return async_to_sync(first)()


def test_an_event_committed_in_a_transaction_arrives_on_the_events_group(listener):
    with transaction.atomic():
        event = record_event(
            "node_pool.created",
            at=timezone.now(),
            message="node pool gpupool is running with 3 nodes",
            cluster="llm-cluster",
            object_key="NodePool/llm-cluster/gpupool",
        )

    message = receive(listener)

    assert message["type"] == "event.created"
    assert message["event"]["seq"] == event.seq
    assert message["event"]["object"] == "NodePool/llm-cluster/gpupool"
