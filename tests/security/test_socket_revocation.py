"""/ws/events/ after access ends: a socket stops as soon as its user logs out, its API token is
revoked or the user is deactivated, and stops carrying a team's events once the user left
the team. A socket that never signed in is closed with the code live.js knows (4401)."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.db import transaction
from django.test import Client
from django.utils import timezone

from api.consumers import UNAUTHORIZED, EventsConsumer
from controlplane.asgi import application
from events.services import record_event
from teams import services as teams
from teams.models import Membership, Team, TeamNamespace

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.asyncio,
    pytest.mark.usefixtures("short_lived_connections"),
]

CLOSED = {"type": "websocket.close", "code": UNAUTHORIZED}
ORIGIN = [(b"origin", b"http://testserver"), (b"host", b"testserver")]


@pytest.fixture
def alice(settings):
    settings.ACCELPLANE_EVENTS_POLL_SECONDS = 0.05
    settings.ACCELPLANE_EVENTS_RECHECK_SECONDS = 60  # only the immediate path, unless a test says
    teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
    return User.objects.get(username="alice")


def write(namespace):
    with transaction.atomic():
        return record_event(
            "workload.admitted", at=timezone.now(), message="m", namespace=namespace
        )


def session_cookie(user):
    client = Client()
    client.force_login(user)
    return client, client.cookies["sessionid"].value


async def open_stream(communicator):
    connected, _ = await communicator.connect()
    assert connected
    while (await communicator.receive_json_from(timeout=5))["type"] != "caught_up":
        pass
    return communicator


async def browser_stream(user):
    """Through the whole ASGI stack, signed in with the session cookie, as live.js does."""
    client, cookie = await database_sync_to_async(session_cookie)(user)
    headers = [*ORIGIN, (b"cookie", f"sessionid={cookie}".encode())]
    communicator = WebsocketCommunicator(application, "/ws/events/", headers=headers)
    return client, await open_stream(communicator)


async def user_stream(user):
    communicator = WebsocketCommunicator(EventsConsumer.as_asgi(), "/ws/events/")
    communicator.scope["user"] = user
    return await open_stream(communicator)


async def token_stream(token):
    headers = [(b"authorization", f"Bearer {token}".encode())]
    return await open_stream(
        WebsocketCommunicator(EventsConsumer.as_asgi(), "/ws/events/", headers)
    )


async def next_event(communicator):
    return (await communicator.receive_json_from(timeout=5))["event"]


async def test_logging_out_closes_the_browsers_stream_at_once(alice):
    client, stream = await browser_stream(alice)

    await database_sync_to_async(client.post)("/logout/")

    assert await stream.receive_output(timeout=5) == CLOSED


async def test_a_session_that_ended_elsewhere_closes_the_stream_within_the_recheck(alice, settings):
    settings.ACCELPLANE_EVENTS_RECHECK_SECONDS = 0.1
    _, stream = await browser_stream(alice)

    await database_sync_to_async(Session.objects.all().delete)()  # expired, cleared: no signal

    assert await stream.receive_output(timeout=5) == CLOSED


async def test_other_sessions_of_the_user_stay_open_when_one_logs_out(alice):
    client, leaving = await browser_stream(alice)
    _, staying = await browser_stream(alice)

    await database_sync_to_async(client.post)("/logout/")

    assert await leaving.receive_output(timeout=5) == CLOSED
    seq = (await database_sync_to_async(write)("llm")).seq
    assert (await next_event(staying))["seq"] == seq
    await staying.disconnect()


async def test_leaving_a_team_stops_its_events_at_once(alice):
    stream = await user_stream(alice)

    await database_sync_to_async(Membership.objects.filter(user=alice).delete)()
    await asyncio.sleep(0.5)  # the change reaches the socket over the channel layer
    await database_sync_to_async(write)("llm")
    everyone = (await database_sync_to_async(write)("")).seq

    assert (await next_event(stream))["seq"] == everyone  # a cluster event, not llm's
    assert await stream.receive_nothing(timeout=0.3)
    await stream.disconnect()


async def test_a_change_no_signal_announced_is_caught_by_the_periodic_recheck(alice, settings):
    settings.ACCELPLANE_EVENTS_RECHECK_SECONDS = 0.1
    stream = await user_stream(alice)
    other = await database_sync_to_async(Team.objects.create)(name="other")

    # A queryset update sends no signal: the namespace moves to a team alice is not in.
    await database_sync_to_async(TeamNamespace.objects.filter(name="llm").update)(team=other)
    await asyncio.sleep(1.0)
    await database_sync_to_async(write)("llm")
    everyone = (await database_sync_to_async(write)("")).seq

    assert (await next_event(stream))["seq"] == everyone
    await stream.disconnect()


async def test_revoking_the_api_token_closes_its_stream(alice):
    row, token = await database_sync_to_async(teams.issue_token)(alice)
    stream = await token_stream(token)
    seq = (await database_sync_to_async(write)("llm")).seq
    assert (await next_event(stream))["seq"] == seq  # the token reads its team's events

    await database_sync_to_async(teams.revoke)(row)

    assert await stream.receive_output(timeout=5) == CLOSED


async def test_deactivating_the_user_closes_their_streams(alice):
    stream = await user_stream(alice)

    alice.is_active = False
    await database_sync_to_async(alice.save)()

    assert await stream.receive_output(timeout=5) == CLOSED


@pytest.mark.parametrize("token", ["apl_not-a-token", "not-even-ours"])
async def test_an_unknown_token_is_closed_with_4401(alice, token):
    headers = [(b"authorization", f"Bearer {token}".encode())]
    communicator = WebsocketCommunicator(EventsConsumer.as_asgi(), "/ws/events/", headers)

    connected, _ = await communicator.connect()

    assert connected
    assert await communicator.receive_output(timeout=5) == CLOSED


async def test_a_socket_without_a_session_is_accepted_then_closed_with_4401(alice):
    """Through the whole stack: not an HTTP 403 handshake, which a browser cannot tell from
    a network error (live.js would reconnect forever)."""
    communicator = WebsocketCommunicator(application, "/ws/events/", headers=ORIGIN)

    connected, _ = await communicator.connect()

    assert connected
    assert await communicator.receive_output(timeout=5) == CLOSED
