"""Each web server `make run` and `make stack` can start (controlplane/run.py) bounds what a
client sends before the application sees it: a request whose header never ends is cut off,
not buffered. (uvicorn with its default parser, httptools, alone buffered 200 MB of one header
line and went on reading; ours, controlplane/http.py, stops past 16 KiB, as daphne does at
Twisted's limit.)"""

from __future__ import annotations

import socket

import pytest

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


@pytest.mark.parametrize("server", run.WEB_SERVERS)
def test_an_endless_header_is_cut_off(server, tmp_path):
    env = {"ACCELPLANE_VAR_DIR": str(tmp_path), "DATABASE_URL": "", "REDIS_URL": ""}
    with web_server(env, tmp_path / f"{server}.log", server) as port:
        accepted = _bytes_accepted_of_an_endless_header(port)

    assert accepted < ENOUGH, f"{server} read {accepted} bytes of one header and went on"
