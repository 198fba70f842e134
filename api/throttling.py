"""Per-token request rates: one busy CI pipeline cannot starve the others."""

from __future__ import annotations

import logging
from contextlib import suppress
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
    """`ACCELPLANE_API_RATE` requests per token (a browser session counts as its user).

    A sliding window of the rate's period, approximated as usual: a counter per fixed window,
    the previous window's count weighed by the share of it still inside the sliding window.
    DRF's own throttle keeps every request time of the period (6,000 at 6000/min), read and
    written back whole by each request, and two requests at once can both take the last
    place; here a request costs a few operations on small integers whatever the rate, and
    the cache's atomic increment gives each request its own place (on Redis, with the read
    of the previous window's count, in one round trip).
    """

    scope = "token"
    # DRF's __init__ sets them from get_rate() with its parse_rate (not in its type stubs).
    num_requests: int
    duration: int
    # Set by each decision, for `wait`: this window's count and the previous window's.
    count: int
    previous: int

    def allow_request(self, request: Request, view: APIView) -> bool:
        try:
            return self._take_place(self.get_cache_key(request, view))
        except RedisError as error:
            # The limit protects the service; with its counters out of reach (Redis
            # restarting) requests go on unlimited rather than fail.
            logger.warning("rate limit not applied: %s", error)
            return True

    def _take_place(self, key: str) -> bool:
        window, self.elapsed = divmod(self.timer(), self.duration)
        current, previous = f"{key}:{int(window)}", f"{key}:{int(window) - 1}"
        # The window's counter lives through the next window too, where it is the previous.
        lifetime = 2 * self.duration
        # Django's cache proxy hands it our Redis backend's method, which takes one round trip.
        if (incr_and_get := getattr(self.cache, "incr_and_get", None)) is not None:
            self.count, self.previous = incr_and_get(current, previous, lifetime)
        else:
            self.count = self._increment(current, lifetime)
            self.previous = self.cache.get(previous, 0)
        still_inside = 1 - self.elapsed / self.duration
        if self.previous * still_inside + self.count <= self.num_requests:
            return True
        # Refused requests do not count (nor do they with DRF's); a counter evicted meanwhile
        # has nothing to take back.
        with suppress(ValueError):
            self.cache.decr(current)
        self.count -= 1
        return False

    def _increment(self, key: str, lifetime: int) -> int:
        try:
            return self.cache.incr(key)
        except ValueError:
            if self.cache.add(key, 1, lifetime):
                return 1
            return self.cache.incr(key)  # another request started the window meanwhile

    def wait(self) -> float:
        """Seconds until the estimate leaves room for one more request (Retry-After)."""
        room = self.num_requests - 1 - self.count
        if room >= 0:  # once enough of the previous window has slid out
            return self.duration * (1 - room / self.previous) - self.elapsed
        # Next window, where this one's count weighs as the previous (a rate of 0 never
        # leaves room: any wait will do).
        share = (self.num_requests - 1) / max(self.count, 1)
        return self.duration * (2 - share) - self.elapsed

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
