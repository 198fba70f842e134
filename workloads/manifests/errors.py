"""The one error every manifest problem becomes: it names the file, document, object and field."""

from __future__ import annotations

from typing import Any


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
        self.message = message
        self.source = source
        self.document = document
        self.object = object
        self.path = path
        self.value = value
        super().__init__(message)

    def __str__(self) -> str:
        where = self.source if self.document is None else f"{self.source}, document {self.document}"
        if self.object:
            where += f" ({self.object})"
        field = f"{self.path}: " if self.path else ""
        return f"{where}: {field}{self.message}"
