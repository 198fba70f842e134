"""Typed reads from a parsed manifest: each failure names the exact field path and value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workloads.manifests.errors import ManifestError
from workloads.manifests.limits import MAX_ANNOTATIONS_BYTES
from workloads.quantities import QuantityError, parse_quantity

if TYPE_CHECKING:
    from workloads.manifests.documents import Document

INT32_MAX = 2**31 - 1
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
NAME_RULES: dict[str, tuple[re.Pattern[str], int, str]] = {
    "subdomain": (
        re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"),
        253,
        "an RFC 1123 subdomain: at most 253 lowercase letters, digits, '-' and '.', "
        "starting and ending with a letter or digit",
    ),
    "label": (
        re.compile(_DNS_LABEL),
        63,
        "an RFC 1123 label: at most 63 lowercase letters, digits and '-', "
        "starting and ending with a letter or digit",
    ),
    "rfc1035": (
        re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?"),
        63,
        "an RFC 1035 label: at most 63 lowercase letters, digits and '-', "
        "starting with a letter and ending with a letter or digit",
    ),
}
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def join(base: str, key: str | int) -> str:
    """`spec.parallelism`, `containers[0]`, `requests[nvidia.com/gpu]`."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    if not _PLAIN_KEY.fullmatch(key):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


# Where a walk over a document is, as (parent, key) pairs from the root (None): checks that
# pass everywhere would otherwise spell out every path they visit, and only an error needs one.
Location = tuple[Any, str | int] | None


def spelled(location: Location) -> str:
    """The `join`ed path of a Location: `spec.template.spec.containers[0]`."""
    keys: list[str | int] = []
    while location is not None:
        location, key = location
        keys.append(key)
    path = ""
    for key in reversed(keys):
        path = join(path, key)
    return path


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def name_problem(value: str, rule: str) -> str | None:
    """Why `value` is not a valid name under `rule` ("subdomain", "label", "rfc1035"), or None."""
    pattern, limit, description = NAME_RULES[rule]
    if len(value) <= limit and pattern.fullmatch(value):
        return None
    return f"{value!r} is not a valid name: it must be {description}"


def label_key_problem(key: str, noun: str = "label key") -> str | None:
    """Why `key` is not a qualified name (`prefix/name`), as labels and resources need."""
    prefix, _, name = key.rpartition("/")
    if prefix and name_problem(prefix, "subdomain"):
        return f"{noun} {key!r} has an invalid prefix: it must be an RFC 1123 subdomain"
    if len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return (
            f"{noun} {key!r} is invalid: the name part must be at most 63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit"
        )
    return None


def _utf8_length(text: str) -> int:
    return len(text.encode(errors="surrogatepass"))  # JSON may carry "\ud800": checked later


def label_value_problem(value: str) -> str | None:
    if value == "" or (len(value) <= 63 and _LABEL_NAME.fullmatch(value)):
        return None
    return (
        f"label value {value!r} is invalid: it must be at most 63 letters, digits, '-', '_' or "
        "'.', starting and ending with a letter or digit"
    )


@dataclass(frozen=True, slots=True)
class Fields:
    """Reads fields of one document; `base` arguments are the parent's field path."""

    source: str
    document: int | None
    object: str | None

    @classmethod
    def of(cls, doc: Document) -> Fields:
        return cls(doc.source, doc.index, doc.title)

    def error(self, path: str | None, value: Any, message: str) -> ManifestError:
        return ManifestError(
            message,
            source=self.source,
            document=self.document,
            object=self.object,
            path=path,
            value=value,
        )

    def mapping(
        self, parent: Mapping[str, Any], key: str, base: str, *, required: bool = False
    ) -> dict[str, Any]:
        """The mapping at `key`; {} when absent or null unless required."""
        value = self.optional_mapping(parent, key, base)
        if value is None:
            if required:
                raise self.error(join(base, key), None, "is required")
            return {}
        return value

    def optional_mapping(
        self, parent: Mapping[str, Any], key: str, base: str
    ) -> dict[str, Any] | None:
        value = parent.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(join(base, key), value, f"{show(value)} is not a mapping")
        return value

    def sequence(
        self,
        parent: Mapping[str, Any],
        key: str,
        base: str,
        *,
        min_items: int = 0,
        max_items: int | None = None,
    ) -> list[Any]:
        """The list at `key` ([] when absent or null), of at least `min_items` items."""
        path = join(base, key)
        value = parent.get(key)
        if value is None:
            value = []
        if not isinstance(value, list):
            raise self.error(path, value, f"{show(value)} is not a list")
        if len(value) < min_items:
            raise self.error(
                path, value, "is required" if not value else f"must have at least {min_items} items"
            )
        if max_items is not None and len(value) > max_items:
            raise self.error(path, len(value), f"has {len(value)} items; at most {max_items}")
        return value

    def mappings(
        self,
        parent: Mapping[str, Any],
        key: str,
        base: str,
        *,
        min_items: int = 0,
        max_items: int | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        """(path, item) for each item of a list of mappings."""
        path = join(base, key)
        items = []
        sequence = self.sequence(parent, key, base, min_items=min_items, max_items=max_items)
        for i, item in enumerate(sequence):
            if not isinstance(item, dict):
                raise self.error(join(path, i), item, f"{show(item)} is not a mapping")
            items.append((join(path, i), item))
        return items

    def string(
        self, parent: Mapping[str, Any], key: str, base: str, *, default: str | None = None
    ) -> str:
        """A string; required (and non-empty) unless a default is given."""
        value = self.optional_string(parent, key, base)
        if value is None or (value == "" and default is None):
            if default is None:
                raise self.error(join(base, key), value, "is required")
            return default
        return value

    def optional_string(self, parent: Mapping[str, Any], key: str, base: str) -> str | None:
        value = parent.get(key)
        if value is not None and not isinstance(value, str):
            raise self.error(join(base, key), value, f"{show(value)} is not a string")
        return value

    def strings(
        self,
        parent: Mapping[str, Any],
        key: str,
        base: str,
        *,
        min_items: int = 0,
        max_items: int | None = None,
    ) -> list[str]:
        path = join(base, key)
        items = self.sequence(parent, key, base, min_items=min_items, max_items=max_items)
        for i, item in enumerate(items):
            if not isinstance(item, str) or not item:
                raise self.error(join(path, i), item, f"{show(item)} is not a non-empty string")
        return items

    def string_map(self, parent: Mapping[str, Any], key: str, base: str) -> dict[str, str]:
        path = join(base, key)
        value = self.mapping(parent, key, base)
        for k, v in value.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise self.error(join(path, str(k)), v, f"{show(v)} is not a string")
        return value

    def labels(self, parent: Mapping[str, Any], key: str, base: str) -> dict[str, str]:
        """A map of label keys to label values (labels, nodeSelector), validated like labels."""
        path = join(base, key)
        value = self.string_map(parent, key, base)
        for k, v in value.items():
            problem = label_key_problem(k) or label_value_problem(v)
            if problem:
                raise self.error(join(path, k), v, problem)
        return value

    def annotations(self, parent: Mapping[str, Any], key: str, base: str) -> dict[str, str]:
        path = join(base, key)
        value = self.string_map(parent, key, base)
        for k in value:
            problem = label_key_problem(k, "annotation key")
            if problem:
                raise self.error(join(path, k), k, problem)
        size = sum(_utf8_length(k) + _utf8_length(v) for k, v in value.items())
        if size > MAX_ANNOTATIONS_BYTES:
            raise self.error(
                path, size, f"{size} bytes in all; annotations may total {MAX_ANNOTATIONS_BYTES}"
            )
        return value

    def integer(
        self,
        parent: Mapping[str, Any],
        key: str,
        base: str,
        *,
        default: int | None = None,
        minimum: int | None = 0,
        maximum: int = INT32_MAX,
    ) -> int:
        """An integer in [minimum, maximum]; required unless a default is given."""
        value = self.optional_integer(parent, key, base, minimum=minimum, maximum=maximum)
        if value is None:
            if default is None:
                raise self.error(join(base, key), None, "is required")
            return default
        return value

    def optional_integer(
        self,
        parent: Mapping[str, Any],
        key: str,
        base: str,
        *,
        minimum: int | None = 0,
        maximum: int = INT32_MAX,
    ) -> int | None:
        value = parent.get(key)
        if value is None:
            return None
        path = join(base, key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(path, value, f"{show(value)} is not an integer")
        if minimum is not None and value < minimum:
            raise self.error(path, value, f"{value} must be at least {minimum}")
        if value > maximum:
            raise self.error(path, value, f"{value} must be at most {maximum}")
        return value

    def boolean(self, parent: Mapping[str, Any], key: str, base: str, *, default: bool) -> bool:
        value = parent.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(join(base, key), value, f"{show(value)} is not a boolean")
        return value

    def choice(
        self,
        parent: Mapping[str, Any],
        key: str,
        base: str,
        choices: tuple[str, ...],
        *,
        default: str,
        aliases: Mapping[str, str] | None = None,
    ) -> str:
        """One of `choices` (or an alias of one), else the default when absent."""
        value = self.optional_string(parent, key, base)
        if value is None:
            return default
        if aliases and value in aliases:
            return aliases[value]
        if value not in choices:
            allowed = ", ".join(choices + tuple(aliases or ()))
            raise self.error(join(base, key), value, f"{value!r} is not one of: {allowed}")
        return value

    def quantity(self, value: Any, path: str) -> int:
        try:
            return parse_quantity(value, field=path)
        except QuantityError as error:
            raise self.error(path, value, f"{show(value)} {error.reason}") from None

    def optional_quantity(self, parent: Mapping[str, Any], key: str, base: str) -> int | None:
        value = parent.get(key)
        return None if value is None else self.quantity(value, join(base, key))

    def name(self, value: str, path: str, rule: str = "subdomain") -> str:
        problem = name_problem(value, rule)
        if problem:
            raise self.error(path, value, problem)
        return value

    def known_keys(self, value: Mapping[str, Any], allowed: frozenset[str], base: str) -> None:
        """Strict field validation, as `kubectl apply` does by default."""
        for key in value:
            if key not in allowed:
                raise self.error(
                    join(base, str(key)),
                    value[key],
                    f"unknown field {key!r}; known fields: {', '.join(sorted(allowed))}",
                )
