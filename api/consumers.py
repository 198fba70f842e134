"""`/ws/events/?after=SEQ`: the event log after SEQ from the database, then live events.

Events reach this consumer two ways: the channel layer (fast, published after commit) and
a poll of the database (for writers the layer cannot reach, such as a Celery worker while
the embedded in-process layer is in use, and for anything lost while Redis restarts). Both
feed one cursor, `last_seq`: an event is sent once, in sequence order, and a gap seen on
the layer is filled from the database first. Seqs have no gaps and become visible in order
(events.services), so whatever precedes a published event is already readable.

Access is re-read while the socket is open (api.socket_auth): every
ACCELPLANE_EVENTS_RECHECK_SECONDS, and at once when api.revocation says it changed. Signed out
(or never signed in), the socket closes with code 4401, which live.js shows as "signed out".
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from api.metrics import WEBSOCKETS
from api.revocation import access_group
from api.socket_auth import Credential, signed_in, still_signed_in
from events.models import Event
from events.services import EVENTS_GROUP, EVENTS_MESSAGE, serialize
from teams.services import Scope
from teams.visibility import is_visible, shown_event, visible_events

BATCH = 500
UNAUTHORIZED = 4401


class EventsConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # untyped library
    async def connect(self) -> None:
        # Accepted before anything else: a refused handshake reaches the browser as a bare
        # HTTP 403, while a close code tells it to stop reconnecting.
        await self.accept()
        signed = await database_sync_to_async(signed_in)(self.scope)
        if signed is None:
            await self.close(code=UNAUTHORIZED)
            return
        self.credential: Credential = signed[0]
        self.caller: Scope = signed[1]
        self.signed_out = False
        self.last_seq = _after(self.scope.get("query_string", b""))
        self.lock = asyncio.Lock()
        await self.channel_layer.group_add(access_group(self.credential.user_id), self.channel_name)
        await self.channel_layer.group_add(EVENTS_GROUP, self.channel_name)
        WEBSOCKETS.inc()
        await self.catch_up()
        await self.send_json({"type": "caught_up", "seq": self.last_seq})
        self.tasks = [asyncio.create_task(self.poll()), asyncio.create_task(self.recheck_often())]

    async def disconnect(self, code: int) -> None:
        if not hasattr(self, "caller"):
            return  # refused: never joined anything
        WEBSOCKETS.dec()
        for task in getattr(self, "tasks", ()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.channel_layer.group_discard(EVENTS_GROUP, self.channel_name)
        await self.channel_layer.group_discard(
            access_group(self.credential.user_id), self.channel_name
        )

    async def access_changed(self, message: dict[str, Any]) -> None:
        """The user's access changed (api.revocation); `session`: that session logged out."""
        async with self.lock:
            if message.get("session") and message["session"] == self.credential.session_key:
                await self._sign_out()
            else:
                await self._recheck()

    async def recheck_often(self) -> None:
        interval = float(settings.ACCELPLANE_EVENTS_RECHECK_SECONDS)
        await _spread(interval)
        while not self.signed_out:
            await asyncio.sleep(interval)
            # Read outside the lock (see `poll`): events sent meanwhile go out as they would
            # have just before this re-check. An access change re-checked meanwhile is newer.
            caller = self.caller
            checked = await database_sync_to_async(still_signed_in)(self.credential)
            async with self.lock:
                if self.signed_out or caller is not self.caller:
                    continue
                if checked is None:
                    await self._sign_out()
                else:
                    self.caller = checked

    async def _recheck(self) -> None:
        """Held under the lock: no event goes out between a change and its re-check."""
        caller = await database_sync_to_async(still_signed_in)(self.credential)
        if caller is None:
            await self._sign_out()
        else:
            self.caller = caller

    async def _sign_out(self) -> None:
        if not self.signed_out:
            self.signed_out = True
            await self.close(code=UNAUTHORIZED)

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' dispatch first closes stale database connections, in the one thread all
        # of the process's sync calls share: each event to each socket queued there behind
        # the other sockets' reads. An event reads the database only in `_catch_up`, through
        # database_sync_to_async, which closes them itself.
        if message["type"] == EVENTS_MESSAGE:
            await self.events_created(message)
        else:
            await super().dispatch(message)

    async def events_created(self, message: dict[str, Any]) -> None:
        """Committed events, in seq order, from the channel layer."""
        async with self.lock:
            for event in message["events"]:
                if self.signed_out:
                    return
                if event["seq"] > self.last_seq + 1:
                    await self._catch_up()  # the gap first; this event comes with it if visible
                if event["seq"] > self.last_seq:
                    await self._send(event)

    async def poll(self) -> None:
        interval = float(getattr(settings, "ACCELPLANE_EVENTS_POLL_SECONDS", 1.0))
        await _spread(interval)
        while not self.signed_out:
            await asyncio.sleep(interval)
            # Read outside the lock: the read waits its turn in the one thread all of the
            # process's sync calls share, and the layer's events would wait behind it. It
            # holds every visible event from `last_seq` up to its last one (seqs become
            # visible in order), so what the layer sent meanwhile is only skipped.
            caller = self.caller
            batch = await database_sync_to_async(self._read)(caller, self.last_seq)
            async with self.lock:
                if caller is not self.caller or len(batch) == BATCH:
                    await self._catch_up()  # read again: access changed, or there is more
                    continue
                for event in batch:
                    if event["seq"] > self.last_seq and not self.signed_out:
                        await self._send(event)

    async def catch_up(self) -> None:
        async with self.lock:
            await self._catch_up()

    async def _catch_up(self) -> None:
        while not self.signed_out:
            batch = await database_sync_to_async(self._read)(self.caller, self.last_seq)
            for event in batch:
                await self._send(event)
            if len(batch) < BATCH:
                return

    async def _send(self, event: dict[str, Any]) -> None:
        self.last_seq = event["seq"]
        if is_visible(self.caller, event):
            await self.send_json({"type": "event", "event": shown_event(self.caller, event)})

    @staticmethod
    def _read(caller: Scope, after: int) -> list[dict[str, Any]]:
        # Committed events are numbered by their writer (or beat), not by every socket's poll:
        # hundreds of sockets would each ask every second whether any are left, and contend
        # for the event log's lock to number them.
        numbered = Event.objects.filter(seq__gt=after)
        rows = visible_events(caller, numbered).order_by("seq")[:BATCH]
        return [serialize(row) for row in rows]


async def _spread(interval: float) -> None:
    """Sockets opened together would poll together, a burst of reads every interval that
    events queue behind: each starts its timer at a random point of the first interval."""
    await asyncio.sleep(random.uniform(0, interval))


def _after(query_string: bytes) -> int:
    values = parse_qs(query_string.decode(errors="replace")).get("after", ["0"])
    # ASCII digits only ("²" passes isdigit, not int()), few enough for a 64-bit seq.
    value = values[0]
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else 0
