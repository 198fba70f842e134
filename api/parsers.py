"""Request bodies: Kubernetes manifests kept as text, for `kubectl apply` semantics, and JSON
nested to a bound."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser
from rest_framework.request import Request

from workloads.manifests.limits import is_nested_deeper


class PayloadTooLarge(APIException):
    status_code = 413
    default_code = "payload_too_large"


class JSONParser(parsers.JSONParser):
    """DRF's, refusing bodies nested more than ACCELPLANE_MAX_NESTING_DEPTH levels (json
    recurses: 100,000 `[` were a RecursionError). DRF reads the body through HttpRequest.body,
    which Django bounds at DATA_UPLOAD_MAX_MEMORY_SIZE (api/errors.py answers 413)."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
            too_deep = is_nested_deeper(data, settings.ACCELPLANE_MAX_NESTING_DEPTH)
        except RecursionError:
            too_deep = True
        if too_deep:
            depth = settings.ACCELPLANE_MAX_NESTING_DEPTH
            raise ParseError(f"JSON parse error - nested deeper than {depth} levels")
        return data


class ManifestParser(BaseParser):
    """YAML (one or more documents) or JSON, handed on as text; the manifest loader parses it,
    so that errors name the document and field the same way for every content type."""

    media_type = "application/yaml"

    def parse(  # type: ignore[override]  # the text itself, not a mapping
        self,
        stream: IO[bytes] | None,
        media_type: str | None = None,
        parser_context: Any = None,
    ) -> str:
        limit = int(settings.ACCELPLANE_MAX_MANIFEST_BYTES)
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise PayloadTooLarge(f"manifests are limited to {limit} bytes")
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ParseError(f"the body is not UTF-8: {error}") from None


class JsonManifestParser(ManifestParser):
    media_type = "application/json"


class TextManifestParser(ManifestParser):
    """`curl --data-binary @job.yaml` sends x-www-form-urlencoded unless told otherwise."""

    media_type = "application/x-yaml"


MANIFEST_PARSERS = [ManifestParser, TextManifestParser, JsonManifestParser]


def manifest_text(request: Request) -> str:
    """The manifests a view with MANIFEST_PARSERS received ("" for an empty body)."""
    return request.data if isinstance(request.data, str) else ""
