"""The event log's filters, as `GET /api/v1/events` and the `/events/` page take them.

Each value is checked against what an Event can hold (the column's length and the shape of
its names), so a bad value is refused with a message naming it instead of matching nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields

from django.db.models import QuerySet

from events.models import Event

# Kubernetes names: DNS labels (clusters, namespaces) and DNS subdomains (workloads).
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
# `noun.past_verb`, e.g. workload.preempted, node_pool.created, audit.deleted.
_TYPE = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
_KIND = re.compile(r"[A-Z][A-Za-z0-9]*")
# (query parameter, pattern, longest value, what it must look like); the lengths are the
# Event columns' (a Kubernetes kind has no column: 63 is longer than any).
_RULES = {
    "cluster": (_LABEL, 63, "a cluster name (lower-case letters, digits and -)"),
    "namespace": (_LABEL, 63, "a namespace (lower-case letters, digits and -)"),
    "kind": (_KIND, 63, "an object kind such as Job or ClusterQueue"),
    "type": (_TYPE, 64, "an event type such as workload.preempted"),
    "workload": (_SUBDOMAIN, 253, "a Kueue workload name"),
}


class FilterError(ValueError):
    """A filter value the log cannot hold; `param` names the query parameter."""

    def __init__(self, param: str, message: str) -> None:
        self.param = param
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Events of one cluster, namespace, object kind, type (event kind) and Kueue workload;
    a field left None matches every event."""

    cluster: str | None = None
    namespace: str | None = None
    kind: str | None = None
    type: str | None = None
    workload: str | None = None

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> EventFilter:
        """From query parameters; an empty one is no filter. Raises FilterError."""
        values: dict[str, str] = {}
        for param, (pattern, longest, looks_like) in _RULES.items():
            value = params.get(param) or ""
            if not value:
                continue
            if len(value) > longest or not pattern.fullmatch(value):
                shown = value if len(value) <= 80 else value[:80] + "…"
                raise FilterError(param, f"{param} {shown!r} is not {looks_like}")
            values[param] = value
        return cls(**values)

    def apply(self, rows: QuerySet[Event]) -> QuerySet[Event]:
        exact = {
            "cluster": self.cluster,
            "namespace": self.namespace,
            "kind": self.type,
            "workload_name": self.workload,
        }
        rows = rows.filter(**{column: v for column, v in exact.items() if v is not None})
        if self.kind is not None:
            rows = rows.filter(object_key__startswith=f"{self.kind}/")
        return rows

    def params(self) -> dict[str, str]:
        """The filters that are set, as query parameters (for links to other pages)."""
        return {f.name: value for f in fields(self) if (value := getattr(self, f.name))}
