"""YAML or JSON text to parsed objects, as kubectl's decoder reads it, within the limits of
one request (docs/api.md, "Limits"): no alias bomb, nesting or document count gets past."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml
from django.conf import settings

from workloads.manifests import limits
from workloads.manifests.errors import ManifestError
from workloads.manifests.fields import Location, show, spelled


class _TooLarge(yaml.YAMLError):
    """A document past a limit, found before it is constructed; `path` is where."""

    def __init__(self, problem: str, path: str | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path = path


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML as kubectl reads it: timestamps stay strings and duplicate keys are errors.

    libyaml's parser when PyYAML has it (several times faster); the same rules either way.
    Each document's node graph is measured before it is constructed (see _Expansion), and
    the request's documents together may expand to ACCELPLANE_MAX_EXPANDED_MANIFEST_BYTES."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.expanded_bytes = 0

    def construct_document(self, node: yaml.Node) -> Any:
        self.expanded_bytes += _Expansion().measure(node, None, 0)[0]
        limit = settings.ACCELPLANE_MAX_EXPANDED_MANIFEST_BYTES
        if self.expanded_bytes > limit:
            raise _TooLarge(
                f"the request's documents expand to more than {limit} "
                "bytes (YAML aliases and merge keys expanded)",
                None,
            )
        return super().construct_document(node)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        # int() of a long digit string is slow (and refused past 4300 digits), and YAML 1.1's
        # base-60 `1:2:3...` is quadratic; a 64-bit integer needs at most 66 characters (0b...).
        if len(node.value) > 70:
            raise yaml.constructor.ConstructorError(
                None, None, "integer too long (more than 70 characters)", node.start_mark
            )
        value: int = super().construct_yaml_int(node)
        return value

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                    )
                seen.add(key_node.value)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _Expansion:
    """Sizes one document's node graph before it is constructed.

    In the graph an alias is a shared node, so measuring costs what the text costs; the
    constructed document, its checks and the stored JSON cost the expanded size, which a
    500-byte alias bomb (or a chain of `<<` merges) makes gigabytes. Refuses, with the path:
    nesting past ACCELPLANE_MAX_NESTING_DEPTH, more than ACCELPLANE_MAX_MANIFEST_ALIASES alias
    uses, and an alias inside the node it names (a recursive document).
    """

    def __init__(self) -> None:
        self.max_depth = settings.ACCELPLANE_MAX_NESTING_DEPTH
        self.max_aliases = settings.ACCELPLANE_MAX_MANIFEST_ALIASES
        self.aliases = 0
        self.measured: dict[int, tuple[int, int]] = {}
        """id(node) -> (expanded size as JSON text, height)"""
        self.open: set[int] = set()

    def measure(self, node: yaml.Node, at: Location, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in self.open:
            raise _TooLarge("a YAML alias refers to a node that contains it", spelled(at) or None)
        if key in self.measured:
            self.aliases += 1
            if self.aliases > self.max_aliases:
                raise _TooLarge(
                    f"more than {self.max_aliases} YAML aliases in one document",
                    spelled(at) or None,
                )
            size, height = self.measured[key]
        else:
            if depth > self.max_depth:
                raise _TooLarge(f"nested deeper than {self.max_depth} levels", spelled(at) or None)
            self.open.add(key)
            size, height = 2, 0
            if isinstance(node, yaml.ScalarNode):
                size += len(node.value)
            elif isinstance(node, yaml.SequenceNode):
                for i, item in enumerate(node.value):
                    item_size, item_height = self.measure(item, (at, i), depth + 1)
                    size, height = size + item_size + 1, max(height, item_height + 1)
            else:
                for key_node, value_node in node.value:
                    name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
                    below = (at, str(name))
                    key_size, _ = self.measure(key_node, below, depth + 1)
                    item_size, item_height = self.measure(value_node, below, depth + 1)
                    size, height = size + key_size + item_size + 2, max(height, item_height + 1)
            self.open.discard(key)
            self.measured[key] = (size, height)
        if depth + height > self.max_depth:
            raise _TooLarge(f"nested deeper than {self.max_depth} levels", spelled(at) or None)
        return size, height


def objects(text: str, source: str) -> Iterator[tuple[int, Any]]:
    """(1-based document index, parsed object) for each non-empty document or List item;
    at most ACCELPLANE_MAX_DOCUMENTS of them, empty YAML documents included."""
    limit = settings.ACCELPLANE_MAX_DOCUMENTS
    for count, (index, raw) in enumerate(_raw_objects(text, source), start=1):
        if count > limit:
            raise ManifestError(
                f"more than {limit} documents in one request", source=source, document=index
            )
        if raw is not None:
            yield index, raw


def _raw_objects(text: str, source: str) -> Iterator[tuple[int, Any]]:
    # kubectl's YAMLOrJSONDecoder sniffs the same way: a leading brace means JSON.
    if text.lstrip().startswith(("{", "[")):
        yield from _json_objects(_json(text, source), source)
        return
    index = 1  # of the document being read: errors name it
    loader = _Loader(text)
    try:
        while loader.check_data():
            raw = loader.get_data()
            if _is_list(raw):
                yield from ((index, item) for item in _list_items(raw, source, index))
            else:
                yield index, raw
            index += 1
    except _TooLarge as error:
        raise ManifestError(error.problem, source=source, document=index, path=error.path) from None
    except yaml.MarkedYAMLError as error:
        raise _yaml_error(error, source, index) from None
    except yaml.YAMLError as error:
        raise ManifestError(f"is not valid YAML: {error}", source=source, document=index) from None
    finally:
        loader.dispose()


def _json(text: str, source: str) -> Any:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise ManifestError(
            f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}",
            source=source,
        ) from None
    except ValueError as error:  # e.g. an integer of more than 4300 digits
        raise ManifestError(f"invalid JSON: {error}", source=source) from None
    except RecursionError:  # deeper than Python's limit, so deeper than ours
        raise _too_deep(source) from None
    if limits.is_nested_deeper(parsed, settings.ACCELPLANE_MAX_NESTING_DEPTH):
        raise _too_deep(source)
    if "\\u" in text and _has_unpaired_surrogate(parsed):
        # Only JSON can say it ("\ud800"); no error message or database could carry it.
        raise ManifestError(
            "contains a \\u escape of half a character (an unpaired UTF-16 surrogate)",
            source=source,
        )
    return parsed


def _has_unpaired_surrogate(parsed: Any) -> bool:
    try:
        json.dumps(parsed, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    return False


def _too_deep(source: str) -> ManifestError:
    return ManifestError(
        f"nested deeper than {settings.ACCELPLANE_MAX_NESTING_DEPTH} levels", source=source
    )


def _yaml_error(error: yaml.MarkedYAMLError, source: str, index: int) -> ManifestError:
    mark = error.problem_mark or error.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = " ".join(filter(None, (error.context, error.problem)))
    return ManifestError(f"invalid YAML{where}: {problem}", source=source, document=index)


def _json_objects(parsed: Any, source: str) -> Iterator[tuple[int, Any]]:
    if isinstance(parsed, list):
        yield from enumerate(parsed, start=1)
    elif _is_list(parsed):
        yield from enumerate(_list_items(parsed, source, None), start=1)
    else:
        yield 1, parsed


def _is_list(raw: Any) -> bool:
    return isinstance(raw, dict) and raw.get("kind") == "List" and raw.get("apiVersion") == "v1"


def _list_items(raw: dict[str, Any], source: str, index: int | None) -> list[Any]:
    items = raw.get("items") or []
    if not isinstance(items, list):
        raise ManifestError(
            f"{show(items)} is not a list", source=source, document=index, path="items", value=items
        )
    return items
