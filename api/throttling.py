"""Per-token request rates: one busy CI pipeline cannot starve the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from teams.models import ApiToken

if TYPE_CHECKING:  # DRF imports its throttles while rest_framework.views loads
    from rest_framework.request import Request
    from rest_framework.views import APIView


class TokenRateThrottle(SimpleRateThrottle):
    """`ACCELPLANE_API_RATE` requests per token (a browser session counts as its user)."""

    scope = "token"

    def get_rate(self) -> str:
        return str(settings.ACCELPLANE_API_RATE)  # read per request, so tests can lower it

    def get_cache_key(self, request: Request, view: APIView) -> str:
        if isinstance(request.auth, ApiToken):
            ident = f"token-{request.auth.pk}"
        elif request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"ip-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
