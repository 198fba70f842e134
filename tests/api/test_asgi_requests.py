"""HTTP requests through the ASGI application the web servers run (controlplane.asgi): every
middleware still applies, and the request enters its thread once rather than once per hook."""

from __future__ import annotations

import pytest
from asgiref import sync
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator

from controlplane.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def get(path: str, token: str | None = None) -> dict:
    headers = [(b"host", b"localhost")]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    communicator = HttpCommunicator(application, "GET", path, headers=headers)
    return async_to_sync(communicator.get_response)()


def test_every_middleware_applies_through_the_asgi_application(alice_token):
    response = get("/api/v1/me", alice_token)
    assert response["status"] == 200
    headers = {k.decode().lower(): v.decode() for k, v in response["headers"]}
    assert headers["x-request-id"]  # ours, the outermost
    assert headers["x-frame-options"] == "DENY"  # the innermost
    assert headers["x-content-type-options"] == "nosniff"  # SecurityMiddleware
    assert b'"alice"' in response["body"]
    assert get("/api/v1/me")["status"] == 401


def test_a_request_enters_its_thread_once(alice_token, monkeypatch):
    entered = []
    original = sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        entered.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted)
    assert get("/api/v1/me", alice_token)["status"] == 200
    # request_started's receivers, the middleware chain (from the outermost, ours, to the view),
    # closing the response. Django's own handler entered it 16 times: for every hook of its
    # middleware mixin (Session, Common, Csrf, Auth, Messages, XFrameOptions) and the view.
    assert entered == [
        "Signal.asend.<locals>.sync_send",
        "request_id.<locals>.middleware",
        "HttpResponseBase.close",
    ]
