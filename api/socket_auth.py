"""Who a WebSocket belongs to, and whether it still does: the browser's session or a script's
API token (`Authorization: Bearer apl_…`), re-read while the socket stays open.

Both functions read the database: call them through database_sync_to_async.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest

from teams import services as teams
from teams.models import ApiToken
from teams.services import Scope, scope_of


@dataclass(frozen=True, slots=True)
class Credential:
    """What signed the socket in: a session, an API token, or (neither) a user an outer
    middleware vouched for."""

    user_id: int
    session_key: str = ""
    token_id: int | None = None


def signed_in(scope: Mapping[str, Any]) -> tuple[Credential, Scope] | None:
    """The socket's credential and what it may see, or None: not signed in."""
    token = _bearer_token(scope.get("headers", ()))
    if token is not None:
        row = teams.authenticate(token)
        if row is None:
            return None
        return Credential(row.user_id, token_id=row.pk), scope_of(row.user)
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return None
    session_key = getattr(scope.get("session"), "session_key", None) or ""
    return Credential(user.pk, session_key=session_key), scope_of(user)


def still_signed_in(credential: Credential) -> Scope | None:
    """What the socket may see now (teams joined or left), or None: signed out, token
    revoked, user deactivated, password changed."""
    user: User | AnonymousUser | None
    if credential.token_id is not None:
        row = (
            ApiToken.objects.filter(
                pk=credential.token_id, revoked_at__isnull=True, user__is_active=True
            )
            .select_related("user")
            .first()
        )
        user = row.user if row else None
    elif credential.session_key:
        request = HttpRequest()
        engine = import_module(settings.SESSION_ENGINE)
        request.session = engine.SessionStore(credential.session_key)
        # Django's own check: the session exists, its user is active, its password unchanged.
        user = auth.get_user(request)
    else:
        user = User.objects.filter(pk=credential.user_id, is_active=True).first()
    if user is None or not user.is_authenticated or user.pk != credential.user_id:
        return None
    return scope_of(user)


def _bearer_token(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return None
