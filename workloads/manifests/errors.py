"""The one error every manifest problem becomes: it names the file, document, object and field."""

from __future__ import annotations

from typing import Any

# A refusal quotes what it refuses, but a value may be most of a 1 MiB request: the answer
# and the `workload.rejected` event keep its start and its end (where the problem is said).
MAX_MESSAGE_CHARS = 500
MAX_VALUE_CHARS = 200


def _clipped(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = (limit - 1) // 2
    return f"{text[:half]}…{text[-half:]}"


class ManifestError(ValueError):
    """A manifest the control plane refuses, as one line a user can act on.

    `source` is the file name (or "request"), `document` the 1-based document index, `object`
    "Kind namespace/name", `path` the field path inside the object and `value` the offending value.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str = "request",
        document: int | None = None,
        object: str | None = None,
        path: str | None = None,
        value: Any = None,
    ) -> None:
        self.message = message = _clipped(message, MAX_MESSAGE_CHARS)
        self.source = source
        self.document = document
        self.object = object
        self.path = path
        self.value = _clipped(value, MAX_VALUE_CHARS) if isinstance(value, str) else value
        super().__init__(message)

    def __str__(self) -> str:
        where = self.source if self.document is None else f"{self.source}, document {self.document}"
        if self.object:
            where += f" ({self.object})"
        field = f"{self.path}: " if self.path else ""
        return f"{where}: {field}{self.message}"
