"""make stack serves HTTP and the WebSockets from servers of their own (controlplane/run.py):
the pages learn the sockets' ports from ACCELPLANE_SOCKET_PORTS, a setting refused at start
when it is not a short list of ports; and every server refuses a body past the limit before
reading it all (the ASGI handler as the body arrives, the middleware from its declared
length), the files of a multipart upload included. (Chunked bodies over WSGI:
tests/api/test_wsgi_requests.py.)"""

from __future__ import annotations

import re

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.files.uploadedfile import SimpleUploadedFile

from controlplane.asgi import application
from controlplane.settings import envports


@pytest.mark.parametrize(
    ("value", "ports"), [("", ()), ("8002", (8002,)), ("8002, 8003", (8002, 8003))]
)
def test_socket_ports_are_read_from_a_list(monkeypatch, value, ports):
    monkeypatch.setenv("ACCELPLANE_SOCKET_PORTS", value)
    assert envports("ACCELPLANE_SOCKET_PORTS") == ports


@pytest.mark.parametrize("value", ["0", "65536", "80x", "8002,", "-1", ",".join(["8002"] * 17)])
def test_anything_but_a_short_list_of_ports_is_refused_naming_the_value(monkeypatch, value):
    monkeypatch.setenv("ACCELPLANE_SOCKET_PORTS", value)
    with pytest.raises(ImproperlyConfigured) as refused:
        envports("ACCELPLANE_SOCKET_PORTS")
    assert "ACCELPLANE_SOCKET_PORTS" in str(refused.value)
    assert repr(value) in str(refused.value)


def socket_port(client) -> str | None:
    found = re.search(r'<body[^>]* data-socket-port="(\d+)"', client.get("/login/").text)
    return found[1] if found else None


@pytest.mark.django_db
def test_pages_open_their_socket_on_one_of_the_sockets_servers(client, settings):
    settings.ACCELPLANE_SOCKET_PORTS = (8002, 8003)
    assert {socket_port(client) for _ in range(40)} == {"8002", "8003"}  # 2**-39 to fail


@pytest.mark.django_db
def test_without_sockets_servers_pages_use_their_own_origin(client, settings):
    settings.ACCELPLANE_SOCKET_PORTS = ()
    assert socket_port(client) is None


def post_through_asgi(messages: list[dict], headers: tuple = ()) -> tuple[int, int]:
    """POST the body `messages` through the ASGI application: (status, messages read)."""
    read = 0

    async def receive() -> dict:
        nonlocal read
        read += 1
        return messages[min(read, len(messages)) - 1]

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/v1/workloads",
        "query_string": b"",
        "headers": [(b"host", b"localhost"), (b"content-type", b"application/yaml"), *headers],
    }
    async_to_sync(application)(scope, receive, send)
    return sent[0]["status"], read


def test_the_asgi_application_stops_reading_a_body_past_the_limit():
    chunk = b"x" * 65536
    endless = [{"type": "http.request", "body": chunk, "more_body": True}]

    status, read = post_through_asgi(endless)

    assert status == 413
    assert read == settings.DATA_UPLOAD_MAX_MEMORY_SIZE // len(chunk) + 1


def test_a_declared_length_past_the_limit_is_refused_before_any_of_the_body_is_read():
    declared = str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1).encode()
    body = [{"type": "http.request", "body": b"x" * 65536, "more_body": True}]

    status, read = post_through_asgi(body, headers=((b"content-length", declared),))

    assert (status, read) == (413, 0)


@pytest.mark.django_db(transaction=True)
def test_a_body_within_the_limit_still_reaches_the_view():
    communicator = HttpCommunicator(
        application,
        "POST",
        "/api/v1/workloads",
        body=b"x" * 1000,
        headers=[(b"host", b"localhost")],
    )
    response = async_to_sync(communicator.get_response)()
    assert response["status"] == 401  # the view's answer: no token


@pytest.mark.django_db
def test_an_upload_past_the_limit_is_refused_before_it_is_read(admin_client):
    big = SimpleUploadedFile("key.json", b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1))
    response = admin_client.post("/platform/", {"service_account_key": big})
    assert response.status_code == 413
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in response.json()["detail"]
