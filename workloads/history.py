"""Events about workloads and the objects that own them, keyed as users name them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from events.models import Event
from events.services import new_event, record_events
from workloads.models import KubeObject, Workload


def workload_event_row(kind: str, row: Workload, at: datetime, message: str, **data: Any) -> Event:
    """Unsaved, for `record_events`; the owner must be loaded (select_related) by the caller."""
    return new_event(
        kind,
        at=at,
        message=message,
        cluster=row.cluster.name,
        namespace=row.namespace,
        object_key=row.owner.key,
        workload=row.name,
        **data,
    )


def workload_event(kind: str, row: Workload, at: datetime, message: str, **data: Any) -> Event:
    return record_events([workload_event_row(kind, row, at, message, **data)])[0]


def object_event(kind: str, obj: KubeObject, at: datetime, message: str, **data: Any) -> Event:
    event = new_event(
        kind,
        at=at,
        message=message,
        cluster=obj.cluster.name,
        namespace=obj.namespace,
        object_key=obj.key,
        **data,
    )
    return record_events([event])[0]
