"""DRF authentication by `Authorization: Bearer <token>`."""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from teams import services


class BearerTokenAuthentication(BaseAuthentication):
    keyword = "bearer"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.encode():
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Authorization: Bearer <token> takes exactly one token")
        token = parts[1].decode(errors="replace")
        if not token.startswith(services.TOKEN_PREFIX):
            return None  # another scheme's bearer token (a workload's checkpoint token)
        row = services.authenticate(token)
        if row is None:
            raise AuthenticationFailed("invalid or revoked token")
        return row.user, row

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'
