"""Requests refused before any view runs."""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections.abc import Callable

from django.conf import settings
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
    multipart upload to disk whatever their size. (The ASGI application bounds bodies as they
    arrive, before this runs: controlplane/asgi.py.)"""

    def middleware(request: HttpRequest) -> HttpResponse:
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if declared.isdigit() and int(declared) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            return body_too_large()
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
