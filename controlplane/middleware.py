"""Requests refused before any view runs."""

from __future__ import annotations

from collections.abc import Callable

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
