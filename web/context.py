"""Template context every page gets (settings.TEMPLATES' context processors)."""

from __future__ import annotations

import random

from django.conf import settings
from django.http import HttpRequest


def sockets(request: HttpRequest) -> dict[str, int]:
    """The port of the server the page's WebSocket goes to, if not the page's own: one of
    ACCELPLANE_SOCKET_PORTS, at random, so that browsers spread over those servers."""
    ports = settings.ACCELPLANE_SOCKET_PORTS
    return {"socket_port": random.choice(ports)} if ports else {}  # a spread, not a secret
