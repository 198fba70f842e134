"""`/ws/events/?after=SEQ`: the event log after SEQ from the database, then live events.

Events reach this consumer two ways: the channel layer (fast, published after commit) and
a poll of the database (for writers the layer cannot reach, such as a Celery worker while
the embedded in-process layer is in use, and for anything lost while Redis restarts). Both
feed one cursor, `last_seq`: an event is sent once, in sequence order, and a gap seen on
the layer is filled from the database first. Commit order equals seq order (events.services),
so whatever precedes a published event is already readable.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from api.events import is_visible, visible_events
from api.metrics import WEBSOCKETS
from events.services import EVENTS_GROUP, serialize
from teams.services import Scope, scope_of

BATCH = 500
UNAUTHORIZED = 4401


class EventsConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # untyped library
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHORIZED)
            return
        self.caller: Scope = await database_sync_to_async(scope_of)(user)
        self.last_seq = _after(self.scope.get("query_string", b""))
        self.lock = asyncio.Lock()
        await self.channel_layer.group_add(EVENTS_GROUP, self.channel_name)
        await self.accept()
        WEBSOCKETS.inc()
        await self.catch_up()
        await self.send_json({"type": "caught_up", "seq": self.last_seq})
        self.poller = asyncio.create_task(self.poll())

    async def disconnect(self, code: int) -> None:
        if not hasattr(self, "caller"):
            return  # refused before it was accepted
        WEBSOCKETS.dec()
        poller = getattr(self, "poller", None)
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        await self.channel_layer.group_discard(EVENTS_GROUP, self.channel_name)

    async def event_created(self, message: dict[str, Any]) -> None:
        """A committed event, from the channel layer."""
        event = message["event"]
        async with self.lock:
            if event["seq"] <= self.last_seq:
                return
            if event["seq"] > self.last_seq + 1:
                await self._catch_up()  # the gap first; this event comes with it if visible
            if event["seq"] > self.last_seq:
                await self._send(event)

    async def poll(self) -> None:
        interval = float(getattr(settings, "ACCELPLANE_EVENTS_POLL_SECONDS", 1.0))
        while True:
            await asyncio.sleep(interval)
            await self.catch_up()

    async def catch_up(self) -> None:
        async with self.lock:
            await self._catch_up()

    async def _catch_up(self) -> None:
        while True:
            batch = await database_sync_to_async(self._read)(self.last_seq)
            for event in batch:
                await self._send(event)
            if len(batch) < BATCH:
                return

    async def _send(self, event: dict[str, Any]) -> None:
        self.last_seq = event["seq"]
        if is_visible(self.caller, event):
            await self.send_json({"type": "event", "event": event})

    def _read(self, after: int) -> list[dict[str, Any]]:
        rows = visible_events(self.caller).filter(id__gt=after).order_by("id")[:BATCH]
        return [serialize(row) for row in rows]


def _after(query_string: bytes) -> int:
    values = parse_qs(query_string.decode(errors="replace")).get("after", ["0"])
    return int(values[0]) if values[0].isdigit() else 0
