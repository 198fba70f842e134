"""What a team member sees: which events, and other teams' objects only as "another team's".

Platform admins see everything. For everyone else, events and reports (explain, what-if) are
redacted wherever they name an object in a namespace the viewer may not read:

- structured references lose who the object is and keep what a team needs to understand what
  happened to it (kind, priority, reason): a report's `{"namespace", "name", "object", ...}`
  dict, and an event's `<role>_namespace` / `<role>_object` data fields (`preemptor_...`);
- text beside them that may quote them (an event's message, a report's `message`/`summary`)
  becomes the writer's `message_for_other_teams`, or, without one (events stored before it
  existed), has the names cut out.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from django.db.models import Q, QuerySet

from events.audit import AUDIT_PREFIX
from events.models import Event
from events.services import numbered_events, serialize
from teams.services import Scope

# A refused manifest without a namespace may be another team's.
PRIVATE_CLUSTER_EVENTS = frozenset({"workload.rejected"})
# Written beside a message that names another namespace: the same news without the names.
OTHER_TEAMS_MESSAGE = "message_for_other_teams"
HIDDEN_OBJECT = "another team's workload"
HIDDEN_NAME = "hidden"
# What identifies an object; the rest of a reference (kind, priority) stays.
IDENTIFYING = ("namespace", "name", "owner", "object")
# An event's data fields that identify the object of a role (`preemptor` is its workload).
ROLE_SUFFIXES = ("", "_name", "_owner", "_object", "_namespace")
TEXT_FIELDS = ("message", "summary")


def visible_events(caller: Scope, events: QuerySet[Event] | None = None) -> QuerySet[Event]:
    """Admins see every event; team members their namespaces' and the cluster-scoped ones
    (clusters, node pools, queues), which concern everyone; audit events are for admins.
    Of `events`, by default the numbered ones, once committed ones are (`numbered_events`)."""
    events = numbered_events() if events is None else events
    if caller.everything:
        return events
    cluster_scoped = (
        Q(namespace="") & ~Q(kind__in=PRIVATE_CLUSTER_EVENTS) & ~Q(kind__startswith=AUDIT_PREFIX)
    )
    return events.filter(Q(namespace__in=caller.readable) | cluster_scoped)


def is_visible(caller: Scope, event: Mapping[str, Any]) -> bool:
    """`visible_events` for one serialized event."""
    if caller.everything:
        return True
    if event["namespace"]:
        return event["namespace"] in caller.readable
    kind = event["kind"]
    return kind not in PRIVATE_CLUSTER_EVENTS and not kind.startswith(AUDIT_PREFIX)


def shown_events(caller: Scope, rows: Iterable[Event]) -> list[dict[str, Any]]:
    """Event rows the caller may see (already filtered by `visible_events`), serialized and
    redacted for them."""
    return [shown_event(caller, serialize(row)) for row in rows]


def shown_event(caller: Scope, event: dict[str, Any]) -> dict[str, Any]:
    """A serialized event the caller may see, without the other teams' objects it names."""
    if caller.everything:
        return event
    hidden = _hidden_roles(caller, event["data"])
    if not hidden:
        return event
    data = dict(event["data"])
    names: set[str] = set()
    for role in hidden:
        for key in (role + suffix for suffix in ROLE_SUFFIXES):
            if isinstance(data.get(key), str):
                names.add(data[key])
                data[key] = ""
        data[f"{role}_hidden"] = True
    message = data.get(OTHER_TEAMS_MESSAGE) or scrub(event["message"], names)
    return {**event, "message": message, "data": data}


def _hidden_roles(caller: Scope, data: Mapping[str, Any]) -> list[str]:
    """The roles (`preemptor`) whose object is in a namespace the caller may not read, as the
    data names it: `<role>_namespace`, or for older events the namespace in `<role>_object`."""
    namespaces: dict[str, set[str]] = defaultdict(set)
    for key, value in data.items():
        if not isinstance(value, str) or not value:
            continue
        if key.endswith("_namespace"):
            namespaces[key.removesuffix("_namespace")].add(value)
        elif key.endswith("_object") and (namespace := namespace_of(value)):
            namespaces[key.removesuffix("_object")].add(namespace)
    return sorted(
        role for role, named in namespaces.items() if not all(map(caller.can_read, named))
    )


def namespace_of(object_key: str) -> str | None:
    """The namespace in an object key (`Kind/namespace/name`); None for a cluster-scoped one."""
    parts = object_key.split("/")
    return parts[1] if len(parts) == 3 else None


def scrub(text: str, names: Iterable[str]) -> str:
    """`text` with every occurrence of `names` replaced: object keys by "another team's
    workload", other names by "hidden". Longest first, so a key goes before its parts."""
    ordered = sorted({name for name in names if name}, key=len, reverse=True)
    if not ordered:
        return text
    pattern = re.compile("|".join(map(re.escape, ordered)))
    return pattern.sub(lambda m: HIDDEN_OBJECT if "/" in m[0] else HIDDEN_NAME, text)


def redact(value: Any, caller: Scope) -> Any:
    """A report (explain, what-if) with other teams' workloads anonymous: a reference keeps
    its kind and priority, loses who it is and says `hidden`; the text around it follows."""
    if caller.everything:
        return value
    return _redact(value, caller, set())


def _redact(value: Any, caller: Scope, names: set[str]) -> Any:
    """`names` collects what was hidden inside `value`, for the text of the dicts around it."""
    if isinstance(value, list):
        return [_redact(item, caller, names) for item in value]
    if not isinstance(value, dict):
        return value
    inner: set[str] = set()
    shown = {key: _redact(item, caller, inner) for key, item in value.items()}
    if _is_hidden_reference(value, caller):
        inner |= {value[key] for key in IDENTIFYING if isinstance(value.get(key), str)}
        shown.update(dict.fromkeys(IDENTIFYING, ""), hidden=True)
    if inner:
        for field in TEXT_FIELDS:
            if isinstance(shown.get(field), str):
                written = shown.get(OTHER_TEAMS_MESSAGE) if field == "message" else None
                shown[field] = written or scrub(shown[field], inner)
    names |= inner
    return shown


def _is_hidden_reference(value: Mapping[str, Any], caller: Scope) -> bool:
    if not (value.get("name") or value.get("object")):
        return False  # names nothing (a preemptor Accelplane does not know)
    if "namespace" in value and ("name" in value or "object" in value):
        return not caller.can_read(value["namespace"] or "")
    # A reference kept without its namespace (an older event's preemptor): read it off the key.
    namespace = namespace_of(value["object"]) if isinstance(value.get("object"), str) else None
    return namespace is not None and not caller.can_read(namespace)
