"""`kubectl apply -f`: YAML or JSON text to validated documents, each naming where it came from."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from workloads.manifests.errors import ManifestError
from workloads.manifests.fields import Fields, join, show

_KUEUE_VERSIONS = ("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")
QUEUE_KINDS = frozenset(
    {
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "WorkloadPriorityClass",
        "AdmissionCheck",
        "Topology",
        "Cohort",
        "PriorityClass",
    }
)
WORKLOAD_KINDS = frozenset({"Job", "Deployment", "JobSet", "LeaderWorkerSet"})
SUPPORTED_VERSIONS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(sorted(QUEUE_KINDS - {"PriorityClass"}), _KUEUE_VERSIONS),
    "PriorityClass": ("scheduling.k8s.io/v1",),
    "Job": ("batch/v1",),
    "Deployment": ("apps/v1",),
    "JobSet": ("jobset.x-k8s.io/v1alpha2",),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/v1",),
    "Service": ("v1",),
    "Secret": ("v1",),
    "ConfigMap": ("v1",),
    "Namespace": ("v1",),
}
CLUSTER_SCOPED = frozenset(
    {
        "ResourceFlavor",
        "ClusterQueue",
        "WorkloadPriorityClass",
        "AdmissionCheck",
        "Topology",
        "Cohort",
        "PriorityClass",
        "Namespace",
    }
)
# apimachinery's name validation per kind; everything else is an RFC 1123 subdomain.
_NAME_RULES = {"Namespace": "label", "Service": "rfc1035"}
_KUSTOMIZE = (
    "Kustomize files are not applied directly; run `kubectl kustomize` and apply its output"
)


@dataclass(frozen=True, slots=True)
class Document:
    source: str
    index: int
    api_version: str
    kind: str
    name: str
    namespace: str | None
    body: dict[str, Any]

    @property
    def key(self) -> str:
        """FORMAT.md's key: `Kind/namespace/name`, or `Kind/name` when cluster-scoped."""
        if self.namespace is None:
            return f"{self.kind}/{self.name}"
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def title(self) -> str:
        """How errors name the object: `Job llm/finetune`, `ClusterQueue cq`."""
        if self.namespace is None:
            return f"{self.kind} {self.name}"
        return f"{self.kind} {self.namespace}/{self.name}"


def load_documents(
    text: str | bytes,
    *,
    source: str,
    default_namespace: str | None = None,
    substitutions: Mapping[str, str] | None = None,
) -> list[Document]:
    """Every object in `text`, validated; raises ManifestError for the first problem found."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ManifestError(f"is not UTF-8 text ({error.reason})", source=source) from None
    for old, new in (substitutions or {}).items():
        text = text.replace(old, new)
    documents: list[Document] = []
    seen: dict[str, int] = {}
    for index, raw in _objects(text, source):
        doc = _document(raw, source=source, index=index, default_namespace=default_namespace)
        if doc.key in seen:
            raise Fields.of(doc).error(
                "metadata.name",
                doc.name,
                f"{doc.key} is defined twice in one request (also document {seen[doc.key]})",
            )
        seen[doc.key] = index
        documents.append(doc)
    if not documents:
        raise ManifestError(
            "no objects to apply (as kubectl says: no objects passed)", source=source
        )
    return documents


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML as kubectl reads it: timestamps stay strings and duplicate keys are errors.

    libyaml's parser when PyYAML has it (several times faster); the same rules either way."""

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


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _objects(text: str, source: str) -> Iterator[tuple[int, Any]]:
    """(1-based document index, parsed object) for each non-empty document or List item."""
    # kubectl's YAMLOrJSONDecoder sniffs the same way: a leading brace means JSON.
    if text.lstrip().startswith(("{", "[")):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as error:
            raise ManifestError(
                f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}",
                source=source,
            ) from None
        yield from _json_objects(parsed, source)
        return
    index = 0
    try:
        for index, raw in enumerate(yaml.load_all(text, Loader=_Loader), start=1):
            if raw is None:
                continue
            if _is_list(raw):
                yield from ((index, item) for item in _list_items(raw, source, index))
            else:
                yield index, raw
    except yaml.MarkedYAMLError as error:
        raise _yaml_error(error, source, index + 1) from None
    except yaml.YAMLError as error:
        raise ManifestError(
            f"is not valid YAML: {error}", source=source, document=index + 1
        ) from None


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


def _document(raw: Any, *, source: str, index: int, default_namespace: str | None) -> Document:
    fields = Fields(source, index, None)
    if not isinstance(raw, dict):
        raise fields.error(None, raw, f"a document must be a mapping, not {type(raw).__name__}")
    api_version = fields.string(raw, "apiVersion", "")
    kind = fields.string(raw, "kind", "")
    _check_kind(fields, api_version, kind)
    metadata = fields.mapping(raw, "metadata", "", required=True)
    name = fields.string(metadata, "name", "metadata")
    namespace = None
    if kind not in CLUSTER_SCOPED:
        namespace = fields.optional_string(metadata, "namespace", "metadata") or (
            default_namespace or "default"
        )
    doc = Document(source, index, api_version, kind, name, namespace, raw)
    fields = Fields.of(doc)
    fields.name(name, "metadata.name", _NAME_RULES.get(kind, "subdomain"))
    if namespace is not None:
        fields.name(namespace, "metadata.namespace", "label")
    fields.labels(metadata, "labels", "metadata")
    fields.annotations(metadata, "annotations", "metadata")
    _check_json_compatible(fields, raw, "")
    return doc


def _check_kind(fields: Fields, api_version: str, kind: str) -> None:
    if api_version.startswith("kustomize.config.k8s.io/"):
        raise fields.error("apiVersion", api_version, _KUSTOMIZE)
    versions = SUPPORTED_VERSIONS.get(kind)
    if versions is None:
        supported = ", ".join(sorted(SUPPORTED_VERSIONS))
        raise fields.error("kind", kind, f"unsupported kind {kind!r}; supported kinds: {supported}")
    if api_version not in versions:
        raise fields.error(
            "apiVersion",
            api_version,
            f"{kind} is not supported at {api_version!r}; supported: {', '.join(versions)}",
        )


def _check_json_compatible(fields: Fields, value: Any, path: str) -> None:
    """The body is stored as JSON: refuse what YAML can say and JSON cannot (e.g. `1: x`)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise fields.error(
                    join(path, str(key)), key, f"mapping key {key!r} is not a string"
                )
            _check_json_compatible(fields, key, join(path, key))
            _check_json_compatible(fields, item, join(path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json_compatible(fields, item, join(path, i))
    elif isinstance(value, str) and "\x00" in value:
        # JSON can escape it, but neither Kubernetes nor PostgreSQL stores it.
        raise fields.error(path, value, "contains a NUL character (\\u0000)")
    elif not isinstance(value, str | int | float | bool) and value is not None:
        raise fields.error(path, value, f"{show(value)} cannot be represented in JSON")
