"""Events: service -> Event row -> (after commit) channel layer -> browser."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from django.db import connection, transaction

from controlplane import bulk
from events.models import Event

logger = logging.getLogger(__name__)

EVENTS_GROUP = "events"
# pg_advisory_xact_lock key: event writers serialise so that commit order equals seq order.
EVENTS_LOCK = 0x4556_4E54
EVENT_COLUMNS = [field.name for field in Event._meta.concrete_fields if not field.primary_key]


def serialize(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "at": event.at.isoformat().replace("+00:00", "Z"),
        "kind": event.kind,
        "cluster": event.cluster,
        "namespace": event.namespace,
        "object": event.object_key,
        "workload": event.workload_name,
        "message": event.message,
        "data": event.data,
    }


def lock_event_log() -> None:
    """Held to commit: a reader that saw seq N never later sees a smaller seq appear."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [EVENTS_LOCK])
    # SQLite serialises writers already (BEGIN IMMEDIATE).


def new_event(
    kind: str,
    *,
    at: datetime,
    message: str,
    cluster: str = "",
    namespace: str = "",
    object_key: str = "",
    workload: str = "",
    **data: Any,
) -> Event:
    """An unsaved Event; `record_events` stores a batch of them."""
    return Event(
        at=at,
        kind=kind,
        cluster=cluster,
        namespace=_storable(namespace),
        object_key=_storable(object_key),
        workload_name=workload,
        message=_storable(message),
        data=_storable(data),
    )


def _storable(value: Any) -> Any:
    """NUL characters escaped: PostgreSQL stores none in text or jsonb, and a refusal's
    message may quote one from a bad manifest (as `\\u0000`, how JSON writes it)."""
    if isinstance(value, str):
        return value.replace("\x00", "\\u0000")
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


_deferred = threading.local()


@contextmanager
def deferred_events() -> Iterator[None]:
    """Events recorded inside are inserted together on the way out, still in the caller's
    transaction: the event log's lock is taken once, and held only from there to the commit
    instead of for the rest of the transaction. Their rows get their seq then."""
    if getattr(_deferred, "events", None) is not None:
        yield  # an outer block writes them
        return
    _deferred.events = []
    try:
        yield
        events = _deferred.events
    finally:
        _deferred.events = None
    record_events(events)


def record_events(events: list[Event]) -> list[Event]:
    """Insert Events in the caller's transaction and publish them once that commits."""
    if not events:
        return events
    pending = getattr(_deferred, "events", None)
    if pending is not None:
        pending.extend(events)
        return events
    lock_event_log()
    # Bound straight away: `bulk_create` compiled every value of every row through the ORM,
    # and most of a burst of admissions went into that.
    rows = [[getattr(event, name) for name in EVENT_COLUMNS] for event in events]
    for event, pk in zip(
        events, bulk.insert_rows_returning_pks(Event, EVENT_COLUMNS, rows), strict=True
    ):
        event.pk = pk
        event._state.adding, event._state.db = False, connection.alias
    transaction.on_commit(partial(publish, events))
    return events


def record_event(kind: str, *, at: datetime, message: str, **fields: Any) -> Event:
    return record_events([new_event(kind, at=at, message=message, **fields)])[0]


def publish(events: Sequence[Event]) -> None:
    """Hand committed events to the channel layer, in order; a failure is logged, never raised:
    the rows are the truth, and a browser catches up by sequence number."""
    layer = get_channel_layer()
    if layer is None or _nobody_listens(layer):
        return
    messages = [{"type": "event.created", "event": serialize(event)} for event in events]
    if isinstance(layer, InMemoryChannelLayer):
        # Its queues belong to the server's event loop: send from there.
        try:
            async_to_sync(_send)(layer, messages)
        except Exception:
            logger.exception("could not publish events %s", [e.pk for e in events])
        return
    _publisher(layer).messages.put(messages)


async def _send(layer: BaseChannelLayer, messages: list[dict[str, Any]]) -> None:
    for message in messages:
        await layer.group_send(EVENTS_GROUP, message)


class _Publisher(threading.Thread):
    """Sends events to a Redis channel layer from one event loop of its own.

    A request or task only queues them: it never waits on Redis, and the layer keeps one
    connection for this loop instead of opening one per event (async_to_sync runs each call
    in a new loop). One thread, one queue: events go out in the order they were handed over.
    """

    def __init__(self, layer: BaseChannelLayer) -> None:
        super().__init__(name="event-publisher", daemon=True)
        self.layer = layer
        self.messages: queue.SimpleQueue[list[dict[str, Any]] | None] = queue.SimpleQueue()

    def run(self) -> None:
        loop = asyncio.new_event_loop()
        while (batch := self.messages.get()) is not None:
            try:
                loop.run_until_complete(_send(self.layer, batch))
            except Exception:
                logger.exception("could not publish events %s", [m["event"]["seq"] for m in batch])
        loop.close()

    def drain(self, timeout: float) -> None:
        """What is queued goes out (for at most `timeout` s), then the thread ends."""
        self.messages.put(None)
        self.join(timeout)


_publishers: dict[int, _Publisher] = {}  # by process: a forked worker starts its own
_publishers_lock = threading.Lock()


def _publisher(layer: BaseChannelLayer) -> _Publisher:
    with _publishers_lock:
        publisher = _publishers.get(os.getpid())
        if publisher is None or not publisher.is_alive():
            publisher = _publishers[os.getpid()] = _Publisher(layer)
            publisher.start()
        return publisher


@atexit.register
def _drain_on_exit() -> None:
    publisher = _publishers.get(os.getpid())
    if publisher is not None and publisher.is_alive():
        publisher.drain(timeout=2.0)


def _nobody_listens(layer: object) -> bool:
    """The in-process layer can tell that no consumer joined the group: skip the send."""
    if not isinstance(layer, InMemoryChannelLayer):
        return False
    return not layer.groups.get(EVENTS_GROUP)
