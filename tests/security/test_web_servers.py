"""Each web server `make run` and `make stack` can start (controlplane/run.py) bounds what a
client sends before the application sees it: a request whose header never ends is cut off,
not buffered. (uvicorn with its default parser, httptools, alone buffered 200 MB of one header
line and went on reading; ours, controlplane/http.py, stops past 16 KiB, as daphne does at
Twisted's limit and granian at the buffer run.py gives it.) And a body past the limit of
every body (settings.DATA_UPLOAD_MAX_MEMORY_SIZE) is refused while it arrives, not read to its
end: Django's ASGI handler alone read it all, spilling it to disk, and its multipart parser
does so with uploaded files."""

from __future__ import annotations

import socket
import time

import pytest
from django.conf import settings

from controlplane import run
from tests.integration.servers import web_server

ENOUGH = 64 * 1024 * 1024  # far past any server's limit and the sockets' buffers
CHUNK = b"a" * 65536


def _bytes_accepted_of_an_endless_header(port: int) -> int:
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(b"GET /api/v1/me HTTP/1.1\r\nHost: localhost\r\nX-Endless: ")
        try:
            while sent < ENOUGH:
                client.sendall(CHUNK)
                sent += len(CHUNK)
        except OSError:  # reset or broken pipe: the server hung up
            return sent
    return sent


def _answer_to_an_endless_body(port: int, content_type: bytes, framing: bytes) -> tuple[bytes, int]:
    """The status code the server answers a body of ENOUGH bytes with, and the bytes of it that
    were sent before the answer came (or the server hung up). `framing`: its declared length,
    or chunks with none declared."""
    sent = 0
    chunked = framing == b"Transfer-Encoding: chunked"
    piece = b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if chunked else CHUNK
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(
            b"POST /submit/ HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
            + content_type
            + b"\r\n"
            + framing
            + b"\r\n\r\n"
        )
        client.setblocking(False)
        answer = b""
        while sent < ENOUGH and not answer:
            try:
                client.send(piece)
                sent += len(CHUNK)
            except BlockingIOError:  # the server is not reading: has it answered?
                time.sleep(0.01)
            except OSError:  # it hung up
                break
            try:
                answer = client.recv(200)
            except BlockingIOError:
                pass
            except OSError:
                break
        client.settimeout(30)
        if not answer:
            answer = client.recv(200)
    return answer.split(b" ")[1] if answer else b"no answer", sent


ALL_SERVERS = [*run.WEB_SERVERS, run.HTTP_SERVER]


@pytest.mark.parametrize("server", ALL_SERVERS)
def test_an_endless_header_is_cut_off(server, tmp_path):
    env = {"ACCELPLANE_VAR_DIR": str(tmp_path), "DATABASE_URL": "", "REDIS_URL": ""}
    with web_server(env, tmp_path / f"{server}.log", server) as port:
        accepted = _bytes_accepted_of_an_endless_header(port)

    assert accepted < ENOUGH, f"{server} read {accepted} bytes of one header and went on"


# daphne is left out: Twisted reads a request's whole body before any application sees it.
@pytest.mark.parametrize("server", [run.DEFAULT_WEB_SERVER, run.HTTP_SERVER])
@pytest.mark.parametrize("content_type", [b"application/yaml", b"multipart/form-data; boundary=x"])
@pytest.mark.parametrize(
    "framing", [b"Content-Length: %d" % ENOUGH, b"Transfer-Encoding: chunked"], ids=str
)
def test_a_body_past_the_limit_is_refused_as_it_arrives(server, content_type, framing, tmp_path):
    env = {"ACCELPLANE_VAR_DIR": str(tmp_path), "DATABASE_URL": "", "REDIS_URL": ""}
    with web_server(env, tmp_path / f"{server}.log", server) as port:
        status, sent = _answer_to_an_endless_body(port, content_type, framing)

    assert status == b"413"
    assert sent < 16 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE, f"{server} read {sent} bytes first"
