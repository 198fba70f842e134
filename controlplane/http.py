"""uvicorn's fastest HTTP/1.1 parser, httptools, with a bound on what a request's head may buffer.

httptools (llhttp) keeps a header line until it ends, however long: uvicorn with it read 200 MB
of one header and went on (tests/security/test_web_servers.py). h11 stops at 16 KiB, but parsed
a submission in 1.2 of the web process's 10.6 ms of CPU. This protocol counts the bytes a
request's head has taken and answers 400, closing the connection, past MAX_HEAD_BYTES; a head
that arrives whole in one read is parsed as it is, so the bound holds to within one read.

Served by `uvicorn --http controlplane.http:BoundedHttpToolsProtocol` (controlplane/run.py).
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# As h11's default bound on an incomplete request line and headers, and Twisted's (daphne).
MAX_HEAD_BYTES = 16 * 1024


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # the next bytes belong to a request line or headers
        self._head_bytes = 0

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._in_head or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES:
            self.send_400_response("Request line and headers too large.")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()
