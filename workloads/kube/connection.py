"""The health of Accelplane's connection to a real cluster's apiserver, per watched resource:
whether a worker watches it, when the last change came and how late, when it dropped, and the
last apiserver errors (the newest ERRORS_KEPT of each watch). Stored on the KubeWatch rows by
the watch sessions (watch.py); shown on the cluster's page and in GET /api/v1/clusters/{id}.
A change of a watch's state makes one `cluster.connection` event per cluster per live tick
(`report`), which the page's section refreshes on; the changes of each watch make none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import transaction
from kubernetes.client.exceptions import ApiException

from clusters.models import Cluster
from events.models import Event
from events.services import record_event
from workloads.kube.client import KubeError
from workloads.models import KubeWatch

CONNECTION = "cluster.connection"
ERRORS_KEPT = 10
"""Errors kept per watched resource; older ones are dropped."""
MESSAGE_CHARS = 300
"""An error message is cut to this many characters (an apiserver body can be long)."""


def heard(state: KubeWatch, changed: Mapping[str, Any] | None, now: datetime) -> list[str]:
    """The apiserver answered: the watch is connected. `changed`: the object of a change
    (ADDED, MODIFIED, DELETED), whose arrival is the last event; its lag is from its last
    write (the newest `metadata.managedFields[].time`, which the apiserver stamps) to `now`.
    Sets the fields on `state`; returns their names for the caller's save."""
    state.disconnected_at = None
    if changed is None:
        return ["disconnected_at"]
    state.last_event_at = now
    written = _last_write(changed)
    state.lag_seconds = max(0.0, (now - written).total_seconds()) if written else None
    return ["disconnected_at", "last_event_at", "lag_seconds"]


def _last_write(obj: Mapping[str, Any]) -> datetime | None:
    times = []
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        try:
            times.append(datetime.fromisoformat(entry["time"]))
        except (TypeError, KeyError, ValueError):
            continue  # an entry without a time (or not one the apiserver writes)
    return max(times, default=None)


def record_error(cluster_id: int, resource: str, error: Exception | str, now: datetime) -> None:
    """The watch of `resource` dropped or failed: it is disconnected since `now` (unless it
    already was), and the error joins the last ERRORS_KEPT."""
    message = error if isinstance(error, str) else describe(error)
    entry = {"at": now.isoformat(), "message": message[:MESSAGE_CHARS]}
    with transaction.atomic():
        row, _ = KubeWatch.objects.select_for_update().get_or_create(
            cluster_id=cluster_id, resource=resource
        )
        row.errors = [*row.errors, entry][-ERRORS_KEPT:]
        row.disconnected_at = row.disconnected_at or now
        row.save(update_fields=["errors", "disconnected_at", "updated_at"])


def describe(error: Exception) -> str:
    """One line: the apiserver's status and message, not its headers."""
    if isinstance(error, ApiException):
        try:
            message = json.loads(error.body or "")["message"]
        except (ValueError, KeyError, TypeError):
            message = ""
        return " ".join(str(p) for p in (error.status, error.reason, message) if p)
    if isinstance(error, KubeError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def status(cluster: Cluster, now: datetime) -> dict[str, Any]:
    """Per watched resource and for the cluster: alive, last event, lag, errors.

    A watch is `watching` while a worker holds its lease and it is connected, `reconnecting`
    while the lease is held but the last session dropped or failed, `stopped` otherwise."""
    # Imported here: watch.py records through this module.
    from workloads.kube.watch import WATCHED, watchable_clusters

    rows = {w.resource: w for w in KubeWatch.objects.filter(cluster=cluster)}
    watches = [_watch(resource, rows.get(resource), now) for resource in sorted(WATCHED)]
    errors = sorted(
        ({**e, "resource": w["resource"]} for w in watches for e in w["errors"]),
        key=lambda e: e["at"],
    )
    events = [w["last_event_at"] for w in watches if w["last_event_at"] is not None]
    return {
        "watched": watchable_clusters().filter(pk=cluster.pk).exists(),
        "alive": sum(w["state"] == "watching" for w in watches),
        "watches": watches,
        "last_event_at": max(events, default=None),
        "errors": errors[-ERRORS_KEPT:],
    }


def report(cluster: Cluster, now: datetime) -> None:
    """`cluster.connection` when a watch of the cluster started, dropped, reconnected or
    stopped since the last one (read back from the event log): a network failure that drops
    every watch at once makes one event, not one per watch."""
    link = status(cluster, now)
    states = {w["resource"]: w["state"] for w in link["watches"]}
    before = (
        Event.objects.filter(cluster=cluster.name, kind=CONNECTION)
        .order_by("-id")
        .values_list("data", flat=True)
        .first()
    )
    if before is not None and before.get("watches") == states:
        return
    if before is None and set(states.values()) == {"stopped"}:
        return  # never watched yet: nothing changed
    reconnecting = sorted(r for r, state in states.items() if state == "reconnecting")
    message = f"{link['alive']} of {len(states)} watches alive"
    if reconnecting:
        message += f"; reconnecting: {', '.join(reconnecting)}"
    record_event(
        CONNECTION,
        at=now,
        message=message,
        cluster=cluster.name,
        alive=link["alive"],
        watches=states,
    )


def _watch(resource: str, row: KubeWatch | None, now: datetime) -> dict[str, Any]:
    if row is None:
        return {
            "resource": resource,
            "state": "stopped",
            "last_event_at": None,
            "lag_seconds": None,
            "disconnected_at": None,
            "errors": [],
        }
    leased = row.leased_until is not None and row.leased_until > now
    state = "stopped" if not leased else "reconnecting" if row.disconnected_at else "watching"
    return {
        "resource": resource,
        "state": state,
        "last_event_at": row.last_event_at,
        "lag_seconds": row.lag_seconds,
        "disconnected_at": row.disconnected_at,
        "errors": list(row.errors),
    }
