"""Django's Redis cache backend, with one redis-py client per connection pool.

Django's builds a new `redis.Redis` for every cache call, and each fills a dict of some 170
response callbacks: about half the time of a cache call. A client holds no state of its own
beyond its pool (a command borrows a connection from the pool and gives it back), so one
per pool serves every call; Django keeps a cache backend per thread anyway.
"""

from __future__ import annotations

from typing import Any

import redis
from django.core.cache.backends import redis as django_redis


class RedisCacheClient(django_redis.RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[redis.ConnectionPool, redis.Redis] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> redis.Redis:
        # Django's own choice of server (its pools are not in its type stubs).
        pool = self._get_connection_pool(write)  # type: ignore[attr-defined]
        client = self._clients.get(pool)
        if client is None:
            client = self._clients[pool] = redis.Redis(connection_pool=pool)
        return client


class RedisCache(django_redis.RedisCache):
    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient
