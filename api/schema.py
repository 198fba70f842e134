"""OpenAPI: how the bearer token appears in the schema, and the view serving /api/schema/."""

from __future__ import annotations

import threading
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "teams.auth.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token (apl_...): `manage.py createteam` or POST /api/v1/tokens",
        }


class SchemaView(SpectacularAPIView):
    """drf-spectacular's schema view, generating one schema at a time per process.

    Its generation is not thread-safe: each extension turns its dotted `target_class` into the
    class on first use (OpenApiGeneratorExtension._matches), so two first requests at once both
    see the string, the second finds a class (or None, for an extension whose package is not
    installed) where it expects the string, and answers 500. It also keeps per-operation state
    (path, method, registry) on view schema instances that every generation shares. A request
    waits for the one in progress; generating takes a fraction of a second, and is rare."""

    _generating = threading.Lock()

    def _get_schema_response(self, request: Request) -> Response:
        with self._generating:
            response: Response = super()._get_schema_response(request)  # type: ignore[no-untyped-call]
            return response
