"""Audit events: who changed which platform object, and how it looked before and after.

The services that make a change record its audit event in the same transaction: a refused
change leaves none, and a change never lacks one. Only platform admins see them.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from events.services import record_event

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser

    from events.models import Event

AUDIT_PREFIX = "audit."


def record_audit(
    actor: AbstractBaseUser | None,
    action: str,
    key: str,
    *,
    cluster: str = "",
    before: Any = None,
    after: Any = None,
) -> Event | None:
    """`actor` `action` (created, configured, deleted, ...) the object `key`; nothing for a
    change the system makes itself (actor None: demo data, scenarios, commands), whose own
    events tell the story."""
    if actor is None:
        return None
    user = actor.get_username()
    return record_event(
        f"{AUDIT_PREFIX}{action}",
        at=timezone.now(),
        cluster=cluster,
        object_key=key,
        message=f"{user} {action} {key}",
        user=user,
        before=before,
        after=after,
    )


def json_time(at: datetime | None) -> str | None:
    """A timestamp as the API shows it (ISO 8601, UTC as Z), for before/after snapshots."""
    if at is None:
        return None
    return timezone.localtime(at).isoformat().replace("+00:00", "Z")
