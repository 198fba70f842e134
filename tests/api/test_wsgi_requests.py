"""HTTP requests through the WSGI application make stack's HTTP servers run (granian,
controlplane/wsgi.py): a chunked body, which has no declared length, is read whole up to the
limit of a body, not seen as empty (Django reads a WSGI body up to CONTENT_LENGTH)."""

from __future__ import annotations

import io
import json
import sys

import pytest
from django.conf import settings

from controlplane.wsgi import application as wsgi_application
from tests.support import NAMESPACE, job

pytestmark = pytest.mark.django_db(transaction=True)


def post_chunked_through_wsgi(body: bytes, token: str) -> tuple[str, dict]:
    """POST `body` to the WSGI application as granian hands over a chunked request: no
    CONTENT_LENGTH, the body in wsgi.input."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/v1/workloads",
        "QUERY_STRING": f"namespace={NAMESPACE}",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "HTTP_HOST": "localhost",
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "HTTP_TRANSFER_ENCODING": "chunked",
        "CONTENT_TYPE": "application/yaml",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    started: list[str] = []
    answer = b"".join(wsgi_application(environ, lambda status, headers: started.append(status)))
    return started[0], json.loads(answer)


def test_a_chunked_submission_is_read_whole_over_wsgi(alice_token):
    """Django reads a WSGI body up to its declared length: a chunked one was seen as empty."""
    status, answer = post_chunked_through_wsgi(job("chunked").encode(), alice_token)
    assert status.startswith("201"), answer
    assert answer["applied"] == [{"key": f"Job/{NAMESPACE}/chunked", "action": "created"}]


def test_a_chunked_body_past_the_limit_is_refused(alice_token):
    body = b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    status, answer = post_chunked_through_wsgi(body, alice_token)
    assert status.startswith("413")
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in answer["detail"]
