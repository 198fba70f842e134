"""Tell a user's open WebSockets at once that their access changed: a logout, a revoked API
token, a team joined or left, the account changed (deactivated, demoted, new password).

The sockets re-check anyway every ACCELPLANE_EVENTS_RECHECK_SECONDS (a change made by another
process, or without a signal, such as a queryset update); this makes it immediate where the
channel layer reaches. Transport only: nothing here decides who may see what.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.http import HttpRequest

from teams.models import ApiToken, Membership

logger = logging.getLogger(__name__)

ACCESS_CHANGED = "access.changed"


def access_group(user_id: int) -> str:
    """The channel-layer group of one user's sockets."""
    return f"access.user.{user_id}"


def notify(user_id: int, **message: str) -> None:
    """Ask `user_id`'s sockets to re-check their access; a failure is logged, never raised
    (the periodic re-check still comes)."""
    layer = get_channel_layer()
    group = access_group(user_id)
    if layer is None or (isinstance(layer, InMemoryChannelLayer) and not layer.groups.get(group)):
        return
    try:
        async_to_sync(layer.group_send)(group, {"type": ACCESS_CHANGED, **message})
    except Exception:
        logger.exception("could not tell the sockets of user %s that their access changed", user_id)


def _after_commit(user_id: int | None) -> None:
    if user_id is not None:
        transaction.on_commit(partial(notify, user_id))


def _logged_out(sender: Any, request: HttpRequest, user: Any, **kwargs: Any) -> None:
    # Sent before the session is flushed: name it, so that its sockets close without asking.
    if user is not None and request.session.session_key:
        notify(user.pk, session=request.session.session_key)


def _membership_changed(sender: Any, instance: Membership, **kwargs: Any) -> None:
    _after_commit(instance.user_id)


def _token_changed(sender: Any, instance: ApiToken, **kwargs: Any) -> None:
    if instance.revoked_at is not None:
        _after_commit(instance.user_id)


def _user_changed(sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any) -> None:
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return  # every login saves it; nothing a socket depends on
    _after_commit(instance.pk)


def connect_signals() -> None:
    user_logged_out.connect(_logged_out, dispatch_uid="accelplane.sockets.logout")
    for signal in (post_save, post_delete):
        signal.connect(_membership_changed, sender=Membership, dispatch_uid="accelplane.sockets")
    post_save.connect(_token_changed, sender=ApiToken, dispatch_uid="accelplane.sockets")
    post_save.connect(_user_changed, sender=get_user_model(), dispatch_uid="accelplane.sockets")
