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


def admitted_events(row: Workload, now: datetime, message: str) -> list[Event]:
    """QuotaReserved and every admission check Ready: the row becomes Admitted (set here, saved
    by the caller); its events, with resumed if it was admitted before."""
    row.phase = Workload.Phase.ADMITTED
    row.admitted_at = now
    events = [
        workload_event_row(
            "workload.admitted", row, now, message, cluster_queue=row.cluster_queue_name
        )
    ]
    if row.resumed_from_step is not None:
        events.append(
            workload_event_row(
                "workload.resumed",
                row,
                now,
                f"resumed from checkpoint at step {row.resumed_from_step}",
                step=row.resumed_from_step,
            )
        )
    return events


def preempted_event_row(
    row: Workload, at: datetime, reason: str, preemptor: Workload | None
) -> Event:
    """`workload.preempted` for `row`, naming its preemptor (owner loaded) by reference too, so
    that a viewer of the victim's team who may not see the preemptor's namespace is shown the
    event without it (teams.visibility): `message_for_other_teams` keeps priority and reason."""
    if preemptor is None:
        message = f"preempted by a workload Accelplane does not know: {reason}"
        return workload_event_row(
            "workload.preempted", row, at, message, reason=reason, preemptor="", preemptor_object=""
        )
    priority = preemptor.priority
    message = (
        f"preempted by {preemptor.owner.key} (workload {preemptor.name}, priority {priority}): "
        f"{reason}"
    )
    return workload_event_row(
        "workload.preempted",
        row,
        at,
        message,
        reason=reason,
        preemptor=preemptor.name,
        preemptor_object=preemptor.owner.key,
        preemptor_namespace=preemptor.namespace,
        preemptor_priority=priority,
        message_for_other_teams=(
            f"preempted by a workload of another team (priority {priority}): {reason}"
        ),
    )
