from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import IO, Any

import django
from asgiref.sync import sync_to_async
from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.urls import path

from controlplane.middleware import body_too_large

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")


Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


class BodyTooLarge(Exception):
    pass


class SyncChainASGIHandler(ASGIHandler):
    """Django's ASGI handler with its middleware and views run in one thread per request.

    Every view is synchronous (Django REST framework's and the pages'), and so are WhiteNoise
    and our own middleware. Django's handler keeps the chain asynchronous up to the first
    synchronous middleware, and its middleware mixin runs each hook of the others in the
    request's thread and back: 16 hand-offs between the event loop and that thread per
    request, a fifth of a web process's time under load. Here the chain is built as WSGI
    builds it, and entered once from the event loop.
    """

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        chain = self._middleware_chain  # type: ignore[has-type]
        self._middleware_chain = sync_to_async(chain, thread_sensitive=True)

    async def handle(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if _declared_length(scope) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            await self.send_response(body_too_large(), send)  # none of it read
            return
        try:
            await super().handle(scope, receive, send)
        except BodyTooLarge:
            await self.send_response(body_too_large(), send)

    async def read_body(self, receive: Receive) -> IO[bytes]:
        """Django's, refusing a body past DATA_UPLOAD_MAX_MEMORY_SIZE as it arrives: Django
        reads the whole body, spilling to disk, before any middleware could look at it."""
        received = 0

        async def bounded() -> Mapping[str, Any]:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
                raise BodyTooLarge
            return message

        return await super().read_body(bounded)


def _declared_length(scope: Mapping[str, Any]) -> int:
    """The request's Content-Length, or 0 if it has none or not a number (the body is then
    bounded as it arrives)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


# Django must be set up before the consumers (and the models they use) are imported.
django.setup(set_prefix=False)
django_asgi_app = SyncChainASGIHandler()

from api.consumers import EventsConsumer  # noqa: E402
from controlplane.heap import freeze_startup_objects  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter([path("ws/events/", EventsConsumer.as_asgi())]))
        ),
    }
)
freeze_startup_objects()
