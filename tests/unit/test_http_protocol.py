"""The web servers' HTTP parser (controlplane/http.py): httptools, with a request's head bounded
and nothing else changed. Served by a real uvicorn on a free port, to an application that
answers with the size of the body it received."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from controlplane import run
from controlplane.http import MAX_HEAD_BYTES


async def body_size(scope, receive, send):  # type: ignore[no-untyped-def]
    received = 0
    while True:
        message = await receive()
        received += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    answer = str(received).encode()
    length = [(b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": length})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    config = uvicorn.Config(
        body_size, host="127.0.0.1", port=0, http=run.HTTP_PROTOCOL, lifespan="off",
        log_level="critical",
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield server.servers[0].sockets[0].getsockname()[1]
    server.should_exit = True
    thread.join(10)


def request(header_bytes: int, body: bytes = b"") -> bytes:
    return (
        b"POST /echo HTTP/1.1\r\nHost: localhost\r\n"
        + b"X-Padding: " + b"a" * header_bytes + b"\r\n"
        + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        + body
    )  # fmt: skip


def answers(conn: socket.socket, count: int) -> list[bytes]:
    """The bodies of the next `count` answers on the connection (each a small, whole one)."""
    received = b""
    bodies: list[bytes] = []
    while len(bodies) < count:
        chunk = conn.recv(65536)
        assert chunk, f"connection closed after {len(bodies)} answers: {received[:200]!r}"
        received += chunk
        while b"\r\n\r\n" in received:
            head, _, rest = received.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            if len(rest) < length:
                break
            assert head.startswith(b"HTTP/1.1 200"), head
            bodies.append(rest[:length])
            received = rest[length:]
    return bodies


def test_a_head_under_the_bound_with_a_large_body_is_served_whole(port):
    body = b"x" * (4 * 1024 * 1024)  # read by the server in many pieces after the head
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request(MAX_HEAD_BYTES - 1024, body))
        assert answers(conn, 1) == [str(len(body)).encode()]


def test_the_bound_is_per_request_on_a_kept_alive_connection(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        for _ in range(8):  # 8 heads of 12 KiB: 96 KiB of heads on one connection
            conn.sendall(request(12 * 1024, b"body"))
            assert answers(conn, 1) == [b"4"]


def test_a_head_sent_a_little_at_a_time_is_cut_off_past_the_bound(port):
    """A slow client's header that never ends: refused once it passes the bound, with what
    the server buffered no larger than the bound and a piece."""
    piece = b"a" * 512
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Endless: ")
        sent = 0
        answer = b""
        while sent <= 4 * MAX_HEAD_BYTES:
            try:
                conn.sendall(piece)
            except OSError:  # reset: the server closed after answering
                break
            sent += len(piece)
            time.sleep(0.001)  # each piece its own read
            conn.setblocking(False)
            try:
                answer += conn.recv(65536)
            except BlockingIOError:
                pass
            finally:
                conn.setblocking(True)
            if answer:
                break
        if not answer:
            conn.settimeout(5)
            answer = conn.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"too large" in answer
    assert sent <= MAX_HEAD_BYTES + 4 * len(piece)
