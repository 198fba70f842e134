"""Request bodies that are Kubernetes manifests: kept as text, for `kubectl apply` semantics."""

from __future__ import annotations

from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser
from rest_framework.request import Request


class PayloadTooLarge(APIException):
    status_code = 413
    default_code = "payload_too_large"


def max_manifest_bytes() -> int:
    return int(settings.ACCELPLANE_MAX_MANIFEST_BYTES)


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
        limit = max_manifest_bytes()
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
