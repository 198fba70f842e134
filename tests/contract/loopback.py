"""What every local fake API shares: a threaded HTTP server on a free loopback port."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LoopbackServer:
    """Serves `handler_class()` on 127.0.0.1 from a daemon thread inside a `with` block."""

    _server: ThreadingHTTPServer | None = None

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> Self:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler_class())
        self._server.daemon_threads = True  # a watch stream must not hold up shutdown
        threading.Thread(target=self._server.serve_forever, args=(0.01,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
