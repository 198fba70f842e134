"""Events: service -> Event row -> (after commit) channel layer -> browser."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
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


def record_event(
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
    """Insert an Event in the caller's transaction and publish it once that commits."""
    lock_event_log()
    event = Event.objects.create(
        at=at,
        kind=kind,
        cluster=cluster,
        namespace=namespace,
        object_key=object_key,
        workload_name=workload,
        message=message,
        data=data,
    )
    transaction.on_commit(lambda: publish(event))
    return event


def publish(event: Event) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            EVENTS_GROUP, {"type": "event.created", "event": serialize(event)}
        )
    except Exception:  # the row is the truth; a browser catches up by sequence number
        logger.exception("could not publish event %s", event.pk)
