"""Requests refused before any view runs."""

from __future__ import annotations

import contextvars
import io
import logging
import uuid
from collections.abc import Callable

from django.conf import settings
from django.core.handlers.wsgi import WSGIRequest
from django.core.signals import request_finished
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, JsonResponse


def reject_nul_bytes(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[..., HttpResponse]:
    """A NUL in the path or query can reach no object (PostgreSQL cannot even compare with one):
    answer 400 instead of letting a lookup fail deep inside."""

    def middleware(request: HttpRequest) -> HttpResponse:
        parts = [
            request.path,
            *request.GET.keys(),
            *(v for _, vs in request.GET.lists() for v in vs),
        ]
        if any("\x00" in part for part in parts):
            return JsonResponse({"detail": "the URL contains a NUL character (%00)"}, status=400)
        return get_response(request)

    return middleware


def body_limit_detail() -> str:
    return f"request bodies are limited to {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"


def body_too_large() -> JsonResponse:
    return JsonResponse({"detail": body_limit_detail()}, status=413)


def bound_request_bodies(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[..., HttpResponse]:
    """A body declared longer than DATA_UPLOAD_MAX_MEMORY_SIZE is refused before any of it is
    read. Django bounds form fields and request.body at that size, but streams the files of a
    multipart upload to disk whatever their size. A chunked body (no declared length) is read
    up to that size under WSGI. (The ASGI application bounds bodies as they arrive, before
    this runs: controlplane/asgi.py.)"""

    def middleware(request: HttpRequest) -> HttpResponse:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        declared = request.META.get("CONTENT_LENGTH") or ""
        if declared.isdigit():
            if int(declared) > limit:
                return body_too_large()
        elif isinstance(request, WSGIRequest) and "chunked" in request.headers.get(
            "Transfer-Encoding", ""
        ):
            # Django reads a WSGI body up to CONTENT_LENGTH, which a chunked body has none of:
            # it would be seen as empty. Read it here, up to the limit, as the body.
            body = request.META["wsgi.input"].read(limit + 1)
            if len(body) > limit:
                return body_too_large()
            # As HttpRequest.body leaves a request it has read: the body, and a stream of it
            # for readers of the stream (the form parsers, Django REST framework's).
            request._body, request._stream = body, io.BytesIO(body)
            request.META["CONTENT_LENGTH"] = str(len(body))
        return get_response(request)

    return middleware


REQUEST_ID = contextvars.ContextVar("request_id", default="-")


def request_id(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[..., HttpResponse]:
    """Tag the request, its log lines and its answer with one id (the caller's X-Request-ID,
    if it sent a sane one), so a failure reported by a user can be found in the logs."""

    def middleware(request: HttpRequest) -> HttpResponse:
        sent = request.headers.get("X-Request-ID", "")
        value = sent if sent.isascii() and 0 < len(sent) <= 64 and sent.isprintable() else ""
        # Kept until request_finished: Django logs 4xx and 5xx after the middleware returns.
        REQUEST_ID.set(value or uuid.uuid4().hex)
        response = get_response(request)
        response["X-Request-ID"] = REQUEST_ID.get()
        return response

    return middleware


@receiver(request_finished)
def _forget_request_id(**kwargs: object) -> None:
    REQUEST_ID.set("-")


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to every log record ("-" outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True
