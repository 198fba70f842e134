"""Django's Redis cache backend, with connection pools and redis-py clients shared by the
whole process.

Django keeps a cache backend per thread and, under ASGI, per request (each request runs in a
context of its own), and each backend opened pools of its own: every API request opened a new
connection to Redis for its rate limit (a TCP handshake, and redis-py's client setup, which
reads its own package metadata from disk). Django also builds a new `redis.Redis` for every
cache call, and each fills a dict of some 170 response callbacks. Pools are thread-safe and a
client holds no state beyond its pool, so one of each per server serves every backend.
"""

from __future__ import annotations

from typing import Any

import redis
from django.core.cache.backends import redis as django_redis

# By server URL and pool options; redis-py pools notice a fork and start afresh in the child.
_pools: dict[tuple[str, str], redis.ConnectionPool] = {}
_clients: dict[redis.ConnectionPool, redis.Redis] = {}


class RedisCacheClient(django_redis.RedisCacheClient):
    def _get_connection_pool(self, write: bool) -> redis.ConnectionPool:
        # Django's own choice of server (its attributes are not in its type stubs).
        server = self._servers[self._get_connection_pool_index(write)]  # type: ignore[attr-defined]
        options: dict[str, Any] = self._pool_options  # type: ignore[attr-defined]
        key = (server, repr(sorted(options.items())))
        if (pool := _pools.get(key)) is None:
            pool = _pools.setdefault(key, self._pool_class.from_url(server, **options))  # type: ignore[attr-defined]
        return pool

    def get_client(self, key: Any = None, *, write: bool = False) -> redis.Redis:
        pool = self._get_connection_pool(write)
        if (client := _clients.get(pool)) is None:
            client = _clients.setdefault(pool, redis.Redis(connection_pool=pool))
        return client


class RedisCache(django_redis.RedisCache):
    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient

    def incr_and_get(self, counter: str, other: str, timeout: int) -> tuple[int, int]:
        """Add one to `counter` (made, at 0, to last `timeout` seconds, if missing) and read
        the counter `other` (0 if missing), in one round trip: `incr` and `get` took three."""
        counter_key = self.make_and_validate_key(counter)
        other_key = self.make_and_validate_key(other)
        client = self._cache.get_client(counter_key, write=True)
        pipeline = client.pipeline(transaction=False)
        pipeline.set(counter_key, 0, ex=timeout, nx=True)
        pipeline.incr(counter_key)
        pipeline.get(other_key)
        _, count, other_count = pipeline.execute()
        return int(count), int(other_count or 0)
