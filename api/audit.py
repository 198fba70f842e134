"""Audit events: who changed which platform object, and how it looked before and after."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework.request import Request

from events.services import record_event

AUDIT_PREFIX = "audit."


def audit(
    request: Request,
    action: str,
    key: str,
    *,
    cluster: str = "",
    before: Any = None,
    after: Any = None,
) -> None:
    user = request.user.get_username()
    record_event(
        f"{AUDIT_PREFIX}{action}",
        at=timezone.now(),
        cluster=cluster,
        object_key=key,
        message=f"{user} {action} {key}",
        user=user,
        before=before,
        after=after,
    )
