"""Events: service -> Event row -> (after commit) channel layer -> browser."""

from __future__ import annotations

import logging
from datetime import datetime
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import connection, transaction

from events.models import Event

logger = logging.getLogger(__name__)

EVENTS_GROUP = "events"
# pg_advisory_xact_lock key: event writers serialise so that commit order equals seq order.
EVENTS_LOCK = 0x4556_4E54


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


def record_events(events: list[Event]) -> list[Event]:
    """Insert Events in the caller's transaction and publish each once that commits."""
    if not events:
        return events
    lock_event_log()
    saved = Event.objects.bulk_create(events)
    for event in saved:
        transaction.on_commit(partial(publish, event))
    return saved


def record_event(kind: str, *, at: datetime, message: str, **fields: Any) -> Event:
    return record_events([new_event(kind, at=at, message=message, **fields)])[0]


def publish(event: Event) -> None:
    layer = get_channel_layer()
    if layer is None or _nobody_listens(layer):
        return
    try:
        async_to_sync(layer.group_send)(
            EVENTS_GROUP, {"type": "event.created", "event": serialize(event)}
        )
    except Exception:  # the row is the truth; a browser catches up by sequence number
        logger.exception("could not publish event %s", event.pk)


def _nobody_listens(layer: object) -> bool:
    """The in-process layer can tell that no consumer joined the group: skip the send."""
    if not isinstance(layer, InMemoryChannelLayer):
        return False
    return not layer.groups.get(EVENTS_GROUP)
