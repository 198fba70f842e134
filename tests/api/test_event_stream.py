"""/ws/events/: the log after a sequence number, then live events, scoped like the REST log."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from api.consumers import UNAUTHORIZED, EventsConsumer
from events.models import Event
from events.services import EVENTS_GROUP, EVENTS_MESSAGE, record_event, serialize
from teams import services as teams

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.asyncio,
    pytest.mark.usefixtures("short_lived_connections"),
]


@pytest.fixture
def people(settings):
    settings.ACCELPLANE_EVENTS_POLL_SECONDS = 0.05
    teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
    teams.ensure_team("vision", namespaces=["vision"], members=[("bob", "submitter")])
    return {name: User.objects.get(username=name) for name in ("alice", "bob")}


def write(namespace, kind="workload.admitted", publish=True):
    """One committed event's seq; without `publish`, as written by a process the channel layer
    cannot reach."""
    if publish:
        with transaction.atomic():
            event = record_event(kind, at=timezone.now(), message=kind, namespace=namespace)
        return event.seq
    with transaction.atomic():
        seq = (Event.objects.aggregate(last=Max("seq"))["last"] or 0) + 1
        Event.objects.create(
            seq=seq, at=timezone.now(), kind=kind, namespace=namespace, message=kind
        )
    return seq


async def connect(user, after=0):
    communicator = WebsocketCommunicator(EventsConsumer.as_asgi(), f"/ws/events/?after={after}")
    communicator.scope["user"] = user
    connected, code = await communicator.connect()
    return communicator, connected, code


async def receive_until_caught_up(communicator):
    events = []
    while True:
        message = await communicator.receive_json_from(timeout=5)
        if message["type"] == "caught_up":
            return events, message["seq"]
        events.append(message["event"])


async def receive_events(communicator, count):
    return [(await communicator.receive_json_from(timeout=5))["event"] for _ in range(count)]


async def test_anonymous_connections_are_closed_with_the_code_live_js_expects():
    communicator, connected, _ = await connect(AnonymousUser())
    assert connected  # accepted, then closed: a refused handshake carries no code
    assert await communicator.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": UNAUTHORIZED,
    }


async def test_the_log_after_seq_comes_first_in_order_and_only_what_the_user_may_see(people):
    seqs = [await database_sync_to_async(write)(ns) for ns in ("llm", "vision", "llm", "", "llm")]
    communicator, connected, _ = await connect(people["alice"], after=seqs[0])
    assert connected
    events, caught_up = await receive_until_caught_up(communicator)
    assert [e["seq"] for e in events] == [seqs[2], seqs[3], seqs[4]]  # not vision's
    assert caught_up == seqs[4]
    await communicator.disconnect()


async def test_live_events_arrive_once_committed_and_other_teams_events_never(people):
    communicator, _, _ = await connect(people["bob"])
    await receive_until_caught_up(communicator)
    await database_sync_to_async(write)("llm")
    mine = await database_sync_to_async(write)("vision")
    (event,) = await receive_events(communicator, 1)
    assert (event["seq"], event["namespace"]) == (mine, "vision")
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()


async def test_events_the_channel_layer_never_carried_arrive_from_the_database(people):
    """A Celery worker on the in-process layer, or a Redis restart: the poll fills the gap."""
    communicator, _, _ = await connect(people["alice"])
    await receive_until_caught_up(communicator)
    unpublished = await database_sync_to_async(write)("llm", publish=False)
    published = await database_sync_to_async(write)("llm")
    events = await receive_events(communicator, 2)
    assert [e["seq"] for e in events] == [unpublished, published]
    await communicator.disconnect()


async def test_a_browser_that_reconnects_with_its_last_seq_misses_nothing(people):
    await database_sync_to_async(write)("llm")
    communicator, _, _ = await connect(people["alice"])
    _, last = await receive_until_caught_up(communicator)
    await communicator.disconnect()
    missed = [await database_sync_to_async(write)("llm") for _ in range(3)]
    again, _, _ = await connect(people["alice"], after=last)
    events, _ = await receive_until_caught_up(again)
    assert [e["seq"] for e in events] == missed
    await asyncio.sleep(0.1)  # polls while idle send nothing twice
    assert await again.receive_nothing(timeout=0.2)
    await again.disconnect()


async def test_live_events_never_wait_for_the_thread_that_reads_the_database(people, settings):
    """Every socket's reads share one sync thread per process: a live event that waited for
    it (as Channels' dispatch makes every message wait) would queue behind all of them."""
    settings.ACCELPLANE_EVENTS_POLL_SECONDS = 600  # only the layer delivers it
    communicator, _, _ = await connect(people["alice"])
    await receive_until_caught_up(communicator)
    seq = await database_sync_to_async(write)("llm", publish=False)
    event = serialize(await Event.objects.aget(seq=seq))
    release = threading.Event()
    busy = asyncio.ensure_future(sync_to_async(release.wait)())
    try:
        await get_channel_layer().group_send(
            EVENTS_GROUP, {"type": EVENTS_MESSAGE, "events": [event]}
        )
        assert await receive_events(communicator, 1) == [event]
    finally:
        release.set()
        await busy
    await communicator.disconnect()


async def test_one_message_of_several_events_arrives_in_order_its_gap_first(people, settings):
    """The layer carries a commit's events in one message: each is sent in seq order, what
    precedes the first (never carried) is read first, another team's are held back."""
    settings.ACCELPLANE_EVENTS_POLL_SECONDS = 600  # only the layer (and the gap's read)
    communicator, _, _ = await connect(people["alice"])
    await receive_until_caught_up(communicator)
    seqs = [
        await database_sync_to_async(write)(namespace, publish=False)
        for namespace in ("llm", "llm", "vision", "llm")
    ]
    carried = await database_sync_to_async(
        lambda: [serialize(e) for e in Event.objects.filter(seq__in=seqs[1:]).order_by("seq")]
    )()
    await get_channel_layer().group_send(EVENTS_GROUP, {"type": EVENTS_MESSAGE, "events": carried})
    events = await receive_events(communicator, 3)
    assert [e["seq"] for e in events] == [seqs[0], seqs[1], seqs[3]]
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()
