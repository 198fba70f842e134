"""Per-token request rates: one busy CI pipeline cannot starve the others."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

from teams.models import ApiToken

if TYPE_CHECKING:  # DRF imports its throttles while rest_framework.views loads
    from rest_framework.request import Request
    from rest_framework.views import APIView

logger = logging.getLogger(__name__)


class TokenRateThrottle(SimpleRateThrottle):
    """`ACCELPLANE_API_RATE` requests per token (a browser session counts as its user)."""

    scope = "token"

    def allow_request(self, request: Request, view: APIView) -> bool:
        try:
            return super().allow_request(request, view)
        except RedisError as error:
            # The limit protects the service; with its counters out of reach (Redis
            # restarting) requests go on unlimited rather than fail.
            logger.warning("rate limit not applied: %s", error)
            return True

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
