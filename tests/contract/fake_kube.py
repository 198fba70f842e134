"""A local fake of the Kubernetes API (the paths Accelplane uses), for contract tests.

- Server-side apply: PATCH of an object's path with Content-Type application/apply-patch+yaml
  and ?fieldManager=; the body's apiVersion and kind must be the path's, its name the path's
  name and its namespace (when set) the path's namespace, or the apiserver's 400/422 comes back.
  It creates or replaces the object (keeping its status, uid and creationTimestamp).
- GET and DELETE (with DeleteOptions) of objects; merge-patch PATCH of objects and of a
  Deployment's /scale subresource.
- Server-side apply tracks field managers as the apiserver does for atomic lists and scalar
  fields: applying, without `force=true`, a value another manager owns (a `put` with
  `manager=`, or another fieldManager's apply) answers 409 Conflict with one
  FieldManagerConflict cause per field; with `force=true` the applier takes the fields over.
- List and watch of any known collection, in a namespace or across all of them. A list answers
  the items and the current resourceVersion; with `limit` it answers pages, each with a
  `continue` token until the last (a token older than a compaction is 410 Expired); a watch
  (?watch=true&resourceVersion=N) streams the changes after N as chunked JSON lines, then the
  new ones as they happen, until timeoutSeconds, and ends with a BOOKMARK when
  allowWatchBookmarks is set.
- A Pod's log (GET .../pods/NAME/log) is the text a test put in `logs`; lists take an
  equality `labelSelector`.
- Test controls: `put` (a controller such as Kueue creating or updating an object, status
  included; `manager=` makes it own the object's fields, as kubectl would), `remove` (one
  deleting it), `drop_next_watch(after=n)` (the next watch connection is cut after n
  events), `compact()` (watches from any older resourceVersion get a 410 Gone ERROR event).
- Discovery of the Kueue group (GET /apis/kueue.x-k8s.io): its served versions, newest
  first (as the apiserver orders a CRD's), `kueue_versions` (both by default; a cluster
  running a Kueue before 0.15 serves v1beta1 only, and its other versions' paths are 404).
- `max_watch_seconds` caps how long a watch stays open (timeoutSeconds is whole seconds):
  tests whose sessions only need what is pending end them sooner.
- `calls` logs every request for tests to assert on.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.contract.loopback import LoopbackServer

KUEUE = "kueue.x-k8s.io"
KUEUE_VERSIONS = frozenset({"v1beta1", "v1beta2"})
# (group, plural) -> (kind, namespaced, served versions).
RESOURCES: dict[tuple[str, str], tuple[str, bool, frozenset[str]]] = {
    ("", "namespaces"): ("Namespace", False, frozenset({"v1"})),
    ("", "services"): ("Service", True, frozenset({"v1"})),
    ("", "configmaps"): ("ConfigMap", True, frozenset({"v1"})),
    ("", "secrets"): ("Secret", True, frozenset({"v1"})),
    ("", "pods"): ("Pod", True, frozenset({"v1"})),
    ("", "nodes"): ("Node", False, frozenset({"v1"})),
    ("apps", "deployments"): ("Deployment", True, frozenset({"v1"})),
    ("batch", "jobs"): ("Job", True, frozenset({"v1"})),
    ("jobset.x-k8s.io", "jobsets"): ("JobSet", True, frozenset({"v1alpha2"})),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): ("LeaderWorkerSet", True, frozenset({"v1"})),
    ("scheduling.k8s.io", "priorityclasses"): ("PriorityClass", False, frozenset({"v1"})),
    ("kueue.x-k8s.io", "resourceflavors"): ("ResourceFlavor", False, KUEUE_VERSIONS),
    ("kueue.x-k8s.io", "cohorts"): ("Cohort", False, KUEUE_VERSIONS),
    ("kueue.x-k8s.io", "clusterqueues"): ("ClusterQueue", False, KUEUE_VERSIONS),
    ("kueue.x-k8s.io", "localqueues"): ("LocalQueue", True, KUEUE_VERSIONS),
    ("kueue.x-k8s.io", "workloadpriorityclasses"): ("WorkloadPriorityClass", False, KUEUE_VERSIONS),
    ("kueue.x-k8s.io", "topologies"): ("Topology", False, KUEUE_VERSIONS),
    ("kueue.x-k8s.io", "admissionchecks"): ("AdmissionCheck", False, KUEUE_VERSIONS),
    ("kueue.x-k8s.io", "workloads"): ("Workload", True, KUEUE_VERSIONS),
}
SEGMENT = r"[^/]+"
PATH = re.compile(
    rf"/(?:api/(?P<core>v1)|apis/(?P<group>{SEGMENT})/(?P<version>{SEGMENT}))"
    rf"(?:/namespaces/(?P<namespace>{SEGMENT}))?/(?P<plural>{SEGMENT})"
    rf"(?:/(?P<name>{SEGMENT}))?(?:/(?P<subresource>scale|status|log))?"
)
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
PROPAGATION = frozenset({"Foreground", "Background", "Orphan"})
MAX_WATCH_SECONDS = 30.0

Key = tuple[str, str, str, str]
"""(group, plural, namespace, name)"""


class Refused(Exception):
    def __init__(
        self, code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.causes = code, reason, message, causes

    def status(self) -> dict[str, Any]:
        status = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.causes:
            status["details"] = {"causes": self.causes}
        return status


@dataclass(frozen=True)
class Target:
    """A request path, resolved against the known resources."""

    group: str
    version: str
    plural: str
    namespace: str
    name: str
    subresource: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> Key:
        return (self.group, self.plural, self.namespace, self.name)


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    status: int = 0


@dataclass(frozen=True)
class Change:
    resource_version: int
    type: str
    key: Key
    object: dict[str, Any]


@dataclass
class FakeKube(LoopbackServer):
    token: str = ""
    """When set, requests must carry `Authorization: Bearer <token>`."""
    calls: list[Call] = field(default_factory=list)
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(100))
    _resource_version: int = 99
    _compacted: int = 0
    _drop_after: int | None = None
    _changed: threading.Condition = field(default_factory=threading.Condition)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, pod) -> the text GET .../pods/NAME/log answers."""
    owners: dict[Key, dict[str, set[str]]] = field(default_factory=dict)
    """Per object: field path (`.spec.cohortName`) -> the field managers that own it."""
    kueue_versions: frozenset[str] = KUEUE_VERSIONS
    """The versions of kueue.x-k8s.io served."""
    max_watch_seconds: float = MAX_WATCH_SECONDS

    # Test controls.

    def put(self, obj: dict[str, Any], manager: str = "") -> dict[str, Any]:
        """A controller creates or updates an object (status included): ADDED or MODIFIED.
        With `manager` (e.g. kubectl's "kubectl-client-side-apply") it owns the fields it set."""
        with self._changed:
            target = self._target_of(obj)
            if manager:
                self._own(target.key, obj, manager, force=True)
            return self._store(target.key, copy.deepcopy(obj), keep_status=False)

    def remove(self, obj: dict[str, Any]) -> None:
        """A controller (or the kubelet, or GKE) deletes an object: DELETED."""
        with self._changed:
            key = self._target_of(obj).key
            self.owners.pop(key, None)
            self._record("DELETED", key, self.objects.pop(key))

    def get(self, group: str, plural: str, namespace: str, name: str) -> dict[str, Any]:
        with self._changed:
            return copy.deepcopy(self.objects[(group, plural, namespace, name)])

    def drop_next_watch(self, after: int) -> None:
        self._drop_after = after

    def compact(self) -> None:
        with self._changed:
            self._compacted = self._resource_version

    def requests(self, method: str, path_suffix: str = "") -> list[Call]:
        return [c for c in self.calls if c.method == method and c.path.endswith(path_suffix)]

    @property
    def resource_version(self) -> int:
        return self._resource_version

    # Server.

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler_for(self)

    # The API.

    def handle(self, call: Call, authorization: str) -> tuple[int, Any]:
        """A plain (non-watch) request: its status and JSON answer."""
        try:
            self._authorize(authorization)
            if call.path == f"/apis/{KUEUE}":
                answer = self._kueue_group()
            else:
                target = self._target(call.path)
                with self._changed:
                    answer = self._route(call, target)
            call.status = 200
        except Refused as refused:
            call.status, answer = refused.code, refused.status()
        self.calls.append(call)
        return call.status, answer

    def _authorize(self, authorization: str) -> None:
        if self.token and authorization != f"Bearer {self.token}":
            raise Refused(401, "Unauthorized", "Unauthorized")

    def _route(self, call: Call, target: Target) -> Any:
        if not target.name:
            if call.method != "GET":
                raise Refused(405, "MethodNotAllowed", f"{call.method} on a collection")
            return self._list(target, call.query)
        if target.namespaced != bool(target.namespace):
            raise Refused(404, "NotFound", "the server could not find the requested resource")
        if call.method == "GET" and target.subresource == "log":
            self._existing(target)
            return self.logs.get((target.namespace, target.name), "")
        if call.method == "GET":
            return self._existing(target)
        if call.method == "DELETE":
            return self._delete(target, call.body)
        if call.method == "PATCH" and call.content_type == APPLY:
            return self._apply(target, call)
        if call.method == "PATCH" and call.content_type == MERGE:
            return self._merge(target, call.body)
        raise Refused(415, "UnsupportedMediaType", f"{call.method} {call.content_type!r}")

    def _kueue_group(self) -> dict[str, Any]:
        if not self.kueue_versions:
            raise Refused(404, "NotFound", "the server could not find the requested resource")
        versions = [
            {"groupVersion": f"{KUEUE}/{v}", "version": v}
            for v in sorted(self.kueue_versions, reverse=True)
        ]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": KUEUE,
            "versions": versions,
            "preferredVersion": versions[0],
        }

    def _target(self, path: str) -> Target:
        match = PATH.fullmatch(path)
        if match is None:
            raise Refused(404, "NotFound", "the server could not find the requested resource")
        group = match["group"] or ""
        version = match["core"] or match["version"]
        resource = RESOURCES.get((group, match["plural"]))
        served = self.kueue_versions if group == KUEUE else resource[2] if resource else ()
        if resource is None or version not in served:
            raise Refused(404, "NotFound", "the server could not find the requested resource")
        kind, namespaced, _ = resource
        if match["namespace"] and not namespaced:
            raise Refused(404, "NotFound", "the server could not find the requested resource")
        subresource = match["subresource"] or ""
        if subresource == "scale" and kind != "Deployment":
            raise Refused(404, "NotFound", f"{kind} has no scale subresource here")
        if subresource == "log" and kind != "Pod":
            raise Refused(404, "NotFound", f"{kind} has no log subresource")
        return Target(
            group,
            version,
            match["plural"],
            match["namespace"] or "",
            match["name"] or "",
            subresource,
            kind,
            namespaced,
        )

    def _target_of(self, obj: dict[str, Any]) -> Target:
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = next(p for (g, p), r in RESOURCES.items() if g == group and r[0] == obj["kind"])
        metadata = obj["metadata"]
        root = f"/apis/{group}/{version}" if group else "/api/v1"
        scope = f"/namespaces/{metadata['namespace']}" if "namespace" in metadata else ""
        return self._target(f"{root}{scope}/{plural}/{metadata['name']}")

    def _existing(self, target: Target) -> dict[str, Any]:
        obj = self.objects.get(target.key)
        if obj is None:
            raise Refused(
                404, "NotFound", f'{target.plural}.{target.group} "{target.name}" not found'
            )
        return self._as_version(obj, target)

    def _apply(self, target: Target, call: Call) -> dict[str, Any]:
        if not call.query.get("fieldManager"):
            raise Refused(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                "is required for apply patch",
            )
        body = call.body
        if not isinstance(body, dict):
            raise Refused(400, "BadRequest", "the apply patch is not an object")
        if body.get("apiVersion") != target.api_version:
            raise Refused(
                400,
                "BadRequest",
                f"the API version in the data ({body.get('apiVersion')}) does not match "
                f"the expected API version ({target.api_version})",
            )
        if body.get("kind") != target.kind:
            raise Refused(
                400,
                "BadRequest",
                f"the kind in the data ({body.get('kind')}) does not match "
                f"the expected kind ({target.kind})",
            )
        metadata = body.get("metadata") or {}
        if metadata.get("name") != target.name:
            raise Refused(
                400,
                "BadRequest",
                f"the name of the object ({metadata.get('name')}) does not match "
                f"the name on the URL ({target.name})",
            )
        if metadata.get("namespace", target.namespace) != target.namespace:
            raise Refused(
                400,
                "BadRequest",
                "the namespace of the provided object does not match "
                "the namespace sent on the request",
            )
        force = call.query.get("force") == "true"
        self._own(target.key, body, call.query["fieldManager"], force, target.api_version)
        obj = copy.deepcopy(body)
        if target.namespace:
            obj["metadata"]["namespace"] = target.namespace
        return self._as_version(self._store(target.key, obj, keep_status=True), target)

    def _own(
        self, key: Key, body: dict[str, Any], manager: str, force: bool, api_version: str = ""
    ) -> None:
        """The apiserver's field ownership: a field whose value changes belongs to its new
        writer, and an apply may change another manager's field only with force."""
        old = _leaves(self.objects.get(key) or {})
        owners = self.owners.setdefault(key, {})
        new = _leaves(body)
        conflicts = sorted(
            (other, path)
            for path, value in new.items()
            for other in owners.get(path, ())
            if other != manager and old.get(path) != value
        )
        if conflicts and not force:
            causes = [
                {
                    "type": "FieldManagerConflict",
                    "message": f'conflict with "{other}" using {api_version}',
                    "field": path,
                }
                for other, path in conflicts
            ]
            listed = "\n".join(f"- {c['message']}: {c['field']}" for c in causes)
            message = f"Apply failed with {len(causes)} conflict(s):\n{listed}"
            raise Refused(409, "Conflict", message, causes)
        for path in list(owners):
            owners[path].discard(manager)
            if path not in new or not owners[path]:
                del owners[path]
        for path, value in new.items():
            changed = force or old.get(path) != value
            owners[path] = {manager} if changed else owners.get(path, set()) | {manager}

    def _merge(self, target: Target, patch: Any) -> dict[str, Any]:
        if not isinstance(patch, dict):
            raise Refused(400, "BadRequest", "a merge patch is an object")
        obj = copy.deepcopy(self._existing(target))
        if target.subresource == "scale":
            replicas = (patch.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                raise Refused(422, "Invalid", f"spec.replicas: Invalid value: {replicas!r}")
            obj["spec"]["replicas"] = replicas
            stored = self._store(target.key, obj, keep_status=True)
            return {
                "kind": "Scale",
                "apiVersion": "autoscaling/v1",
                "metadata": {k: stored["metadata"][k] for k in ("name", "namespace", "uid")},
                "spec": {"replicas": replicas},
                "status": {"replicas": (stored.get("status") or {}).get("replicas", 0)},
            }
        return self._as_version(self._store(target.key, _merged(obj, patch), False), target)

    def _delete(self, target: Target, options: Any) -> dict[str, Any]:
        if options is not None:
            if not isinstance(options, dict) or options.get("kind") != "DeleteOptions":
                raise Refused(400, "BadRequest", "the body is not a DeleteOptions")
            if options.get("propagationPolicy", "Background") not in PROPAGATION:
                raise Refused(422, "Invalid", "propagationPolicy: Unsupported value")
        obj = self._existing(target)
        del self.objects[target.key]
        self.owners.pop(target.key, None)
        self._record("DELETED", target.key, obj)
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {}}

    def _list(self, target: Target, query: dict[str, str]) -> dict[str, Any]:
        """`labelSelector`: equality terms `key=value,...`, the only kind Accelplane sends.
        `limit`/`continue`: one page; the token is `<resourceVersion>:<offset>`."""
        selector = query.get("labelSelector", "")
        wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
        items = [
            self._as_version(obj, target)
            for key, obj in sorted(self.objects.items())
            if _selects(target, key)
            and wanted.items() <= (obj["metadata"].get("labels") or {}).items()
        ]
        version, start = self._resource_version, 0
        if query.get("continue"):
            token, _, offset = query["continue"].partition(":")
            version, start = int(token), int(offset)
            if version < self._compacted:
                raise Refused(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
        limit = int(query.get("limit") or 0)
        end = start + limit if limit else len(items)
        metadata = {"resourceVersion": str(version)}
        if end < len(items):
            metadata["continue"] = f"{version}:{end}"
        return {
            "apiVersion": target.api_version,
            "kind": f"{target.kind}List",
            "metadata": metadata,
            "items": items[start:end],
        }

    def _store(self, key: Key, obj: dict[str, Any], keep_status: bool) -> dict[str, Any]:
        old = self.objects.get(key)
        metadata = obj.setdefault("metadata", {})
        metadata.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
        created = old["metadata"]["creationTimestamp"] if old else _now()
        metadata.setdefault("creationTimestamp", created)
        metadata["generation"] = (old["metadata"].get("generation", 0) if old else 0) + 1
        if keep_status and old is not None and "status" in old:
            obj["status"] = old["status"]
        self._resource_version = next(self._versions)
        metadata["resourceVersion"] = str(self._resource_version)
        self.objects[key] = obj
        self._record("MODIFIED" if old else "ADDED", key, obj)
        return copy.deepcopy(obj)

    def _record(self, kind: str, key: Key, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._resource_version = next(self._versions)
            obj = {
                **obj,
                "metadata": {**obj["metadata"], "resourceVersion": str(self._resource_version)},
            }
        self.changes.append(Change(self._resource_version, kind, key, copy.deepcopy(obj)))
        self._changed.notify_all()

    def _as_version(self, obj: dict[str, Any], target: Target) -> dict[str, Any]:
        # Served versions of a group hold the same fields here: conversion is a relabel.
        return {**copy.deepcopy(obj), "apiVersion": target.api_version}

    # Watches.

    def watch(self, call: Call, authorization: str, send: Any) -> None:
        """Streams one watch; `send(event)` writes one line, `send(None)` cuts the connection."""
        try:
            self._authorize(authorization)
            target = self._target(call.path)
        except Refused as refused:
            call.status = refused.code
            self.calls.append(call)
            send({"type": "ERROR", "object": refused.status()})
            return
        call.status = 200
        self.calls.append(call)
        since = int(call.query.get("resourceVersion") or 0)
        seconds = min(
            float(call.query.get("timeoutSeconds") or MAX_WATCH_SECONDS), self.max_watch_seconds
        )
        deadline = time.monotonic() + seconds
        drop_after, self._drop_after = self._drop_after, None
        if since and since < self._compacted:
            message = f"too old resource version: {since} ({self._compacted})"
            send({"type": "ERROR", "object": Refused(410, "Expired", message).status()})
            return
        sent = 0
        while True:
            with self._changed:
                pending = [
                    c
                    for c in self.changes
                    if c.resource_version > since and _selects(target, c.key)
                ]
                if not pending:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._changed.wait(min(remaining, 0.05))
                    continue
            for change in pending:
                if drop_after is not None and sent >= drop_after:
                    send(None)
                    return
                send({"type": change.type, "object": self._as_version(change.object, target)})
                since = change.resource_version
                sent += 1
        if call.query.get("allowWatchBookmarks") == "true":
            bookmark = {
                "apiVersion": target.api_version,
                "kind": target.kind,
                "metadata": {"resourceVersion": str(self._resource_version)},
            }
            send({"type": "BOOKMARK", "object": bookmark})


def _selects(target: Target, key: Key) -> bool:
    group, plural, namespace, _ = key
    return (group, plural) == (target.group, target.plural) and (
        not target.namespace or namespace == target.namespace
    )


def _leaves(obj: dict[str, Any], base: str = "") -> dict[str, Any]:
    """An object's fields by path, metadata and status aside; lists are atomic (as Kueue's
    resourceGroups and most lists of its CRDs are)."""
    leaves: dict[str, Any] = {}
    for key, value in obj.items():
        if not base and key in ("apiVersion", "kind", "metadata", "status"):
            continue
        path = f"{base}.{key}"
        if isinstance(value, dict) and value:
            leaves.update(_leaves(value, path))
        else:
            leaves[path] = value
    return leaves


def _merged(obj: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(obj) if isinstance(obj, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merged(result.get(key), value)
    return result


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _handler_for(fake: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _call(self) -> Call:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            # The client sends JSON, even for apply-patch+yaml (JSON is YAML); a missing
            # Content-Type is JSON too, as the real apiserver takes it.
            body = json.loads(raw) if raw else None
            return Call(
                self.command,
                parts.path,
                dict(parse_qsl(parts.query)),
                self.headers.get("Content-Type", ""),
                body,
            )

        def _answer(self) -> None:
            call = self._call()
            authorization = self.headers.get("Authorization", "")
            if self.command == "GET" and call.query.get("watch") in ("true", "1"):
                self._stream(call, authorization)
                return
            status, answer = fake.handle(call, authorization)
            # A pod's log is plain text, everything else JSON.
            text = isinstance(answer, str)
            data = answer.encode() if text else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, call: Call, authorization: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            cut = False

            def send(event: dict[str, Any] | None) -> None:
                nonlocal cut
                if event is None:
                    cut = True
                    return
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()

            fake.watch(call, authorization, send)
            if not cut:
                self.wfile.write(b"0\r\n\r\n")
            # A cut connection ends without the last chunk, as a dropped one does.
            self.close_connection = True

        do_GET = do_PATCH = do_DELETE = do_POST = do_PUT = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
