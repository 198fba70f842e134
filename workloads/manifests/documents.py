"""`kubectl apply -f`: YAML or JSON text to validated documents, each naming where it came from."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workloads.manifests import limits
from workloads.manifests.configuration import CONFIG_VERSIONS, CONFIGURATION_NAME
from workloads.manifests.errors import ManifestError
from workloads.manifests.fields import Fields, Location, join, show, spelled
from workloads.manifests.parsing import objects

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
        "Configuration",
    }
)
WORKLOAD_KINDS = frozenset({"Job", "Deployment", "JobSet", "LeaderWorkerSet"})
SUPPORTED_VERSIONS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(sorted(QUEUE_KINDS - {"PriorityClass", "Configuration"}), _KUEUE_VERSIONS),
    "PriorityClass": ("scheduling.k8s.io/v1",),
    "Configuration": CONFIG_VERSIONS,
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
        "Configuration",
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
    for index, raw in objects(text, source):
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


def _document(raw: Any, *, source: str, index: int, default_namespace: str | None) -> Document:
    fields = Fields(source, index, None)
    if not isinstance(raw, dict):
        raise fields.error(None, raw, f"a document must be a mapping, not {type(raw).__name__}")
    api_version = fields.string(raw, "apiVersion", "")
    kind = fields.string(raw, "kind", "")
    _check_kind(fields, api_version, kind)
    # Kueue's own Configuration file has no metadata: it is named CONFIGURATION_NAME then.
    configuration = kind == "Configuration"
    metadata = fields.mapping(raw, "metadata", "", required=not configuration)
    if configuration and not metadata.get("name"):
        name = CONFIGURATION_NAME
    else:
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
    _check_json_compatible(fields, raw, None)
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


def _check_json_compatible(fields: Fields, value: Any, at: Location) -> None:
    """The body is stored as JSON: refuse what YAML can say and JSON cannot (e.g. `1: x`),
    and what Python's JSON reads but Kubernetes does not store (NaN, 1e400, 2**64)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise fields.error(
                    join(spelled(at), str(key)), key, f"mapping key {key!r} is not a string"
                )
            _check_json_compatible(fields, key, (at, key))
            _check_json_compatible(fields, item, (at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json_compatible(fields, item, (at, i))
    elif isinstance(value, str):
        _check_text(fields, value, at)
    elif isinstance(value, float) and not math.isfinite(value):
        raise fields.error(spelled(at), value, f"{value} is not a finite number")
    elif isinstance(value, int) and not limits.INT64_MIN <= value <= limits.INT64_MAX:
        raise fields.error(spelled(at), str(value), "is out of range for a 64-bit integer")
    elif not isinstance(value, str | int | float | bool) and value is not None:
        raise fields.error(spelled(at), value, f"{show(value)} cannot be represented in JSON")


def _check_text(fields: Fields, value: str, at: Location) -> None:
    if "\x00" in value:
        # JSON can escape it, but neither Kubernetes nor PostgreSQL stores it.
        raise fields.error(spelled(at), value, "contains a NUL character (\\u0000)")
    try:
        value.encode()
    except UnicodeEncodeError as error:  # JSON's "\ud800": half a character, not text
        shown = value.encode(errors="backslashreplace").decode()
        raise fields.error(spelled(at), shown, f"is not valid Unicode ({error.reason})") from None
