"""A local fake of the GKE v1 REST API (container.googleapis.com/v1), for contract tests.

- Every request body is parsed strictly into its published google.container.v1 request message
  (camelCase names, value types; enums may be ints, int64 strings): an unknown field or a wrong
  type is a 400 INVALID_ARGUMENT, as Google answers.
- Clusters, node pools and operations live in memory. An operation finishes (DONE, its target
  RUNNING) after `polls_to_finish` reads of the operation or of its target.
- `fail_next(status)` makes the next call fail with Google's error body for that status;
  `fail_next_operation(message)` makes the next operation finish with an error.
- `calls` logs every request (method, path, body, answered status) for tests to assert on.
- `add_existing(project, location, cluster)` puts a RUNNING cluster made outside Accelplane
  (gcloud, Terraform) where list and get find it; `existing_cluster()` is one with a CPU, a
  GPU (autoscaled) and a multi-host TPU pool, as GKE reports them.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from google.cloud import container_v1
from google.protobuf import json_format

from tests.contract.loopback import LoopbackServer

# google.rpc.Code name -> HTTP status, as Google's REST gateway maps them.
HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "ABORTED": 409,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
}
DEFAULT_MESSAGES = {
    "RESOURCE_EXHAUSTED": 'Insufficient regional quota to satisfy request: resource "TPUS".',
    "PERMISSION_DENIED": "Required 'container.clusters.create' permission.",
    "UNAVAILABLE": "The service is currently unavailable.",
}

# What GKE reports in masterAuth.clusterCaCertificate: a base64 PEM (this one is not a real CA).
FAKE_CA_CERTIFICATE = (
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCmZha2UKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
)
LOCATION = r"/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"
CLUSTER = LOCATION + r"/clusters/(?P<cluster>[^/:]+)"
POOL = CLUSTER + r"/nodePools/(?P<pool>[^/:]+)"


class ApiError(Exception):
    def __init__(self, status: str, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.reason = status, message, reason

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "code": HTTP_STATUS[self.status],
            "message": self.message,
            "status": self.status,
        }
        if self.reason:
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": self.reason,
                    "domain": "container.googleapis.com",
                }
            ]
        return {"error": error}


@dataclass
class Call:
    method: str
    path: str
    body: dict[str, Any] | None
    status: int = 0


@dataclass
class _Operation:
    json: dict[str, Any]
    target: str
    polls_left: int
    on_done: Callable[[], None]
    error: str = ""


@dataclass
class FakeGke(LoopbackServer):
    polls_to_finish: int = 2
    calls: list[Call] = field(default_factory=list)
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    operations: dict[str, _Operation] = field(default_factory=dict)
    _failures: list[ApiError] = field(default_factory=list)
    _operation_errors: list[str] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # Test controls.

    def fail_next(self, status: str, message: str = "", reason: str = "") -> None:
        message = message or DEFAULT_MESSAGES.get(status, status.replace("_", " ").lower())
        self._failures.append(ApiError(status, message, reason))

    def fail_next_operation(self, message: str) -> None:
        self._operation_errors.append(message)

    def requests(self, method: str, suffix: str = "", status: int | None = None) -> list[Call]:
        """Logged calls with this method whose path ends with `suffix` (and this status)."""
        return [
            c
            for c in self.calls
            if c.method == method
            and c.path.endswith(suffix)
            and (status is None or c.status == status)
        ]

    def add_existing(self, project: str, location: str, cluster: dict[str, Any]) -> str:
        """A cluster someone made outside Accelplane; checked against google.container.v1."""
        try:
            json_format.ParseDict(cluster, container_v1.Cluster.pb()(), ignore_unknown_fields=False)
        except json_format.ParseError as error:
            raise AssertionError(f"not a GKE Cluster: {error}") from None
        path = f"projects/{project}/locations/{location}/clusters/{cluster['name']}"
        with self._lock:
            self.clusters[path] = {
                **cluster,
                "location": location,
                "selfLink": f"https://container.googleapis.com/v1/{path}",
            }
        return path

    def pool(self, cluster_path: str, name: str) -> dict[str, Any]:
        return next(p for p in self.clusters[cluster_path]["nodePools"] if p["name"] == name)

    # Server.

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler_for(self)

    def handle(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        call = Call(method, path, body)
        with self._lock:
            self.calls.append(call)
            try:
                if self._failures:
                    raise self._failures.pop(0)
                call.status, answer = 200, self._route(method, path, body or {})
            except ApiError as error:
                call.status, answer = HTTP_STATUS[error.status], error.body()
        return call.status, answer

    # The API.

    def _route(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        for route_method, pattern, request_type, handler in self._routes():
            match = re.fullmatch(pattern, path)
            if match and method == route_method:
                if request_type is not None:
                    _parse_strictly(body, request_type)
                return handler(match, body)
        raise ApiError("NOT_FOUND", f"Method not found: {method} {path}")

    def _routes(self) -> list[tuple[str, str, type | None, Callable[..., dict[str, Any]]]]:
        return [
            ("POST", LOCATION + "/clusters", container_v1.CreateClusterRequest, self._create),
            ("GET", LOCATION + "/clusters", None, self._list),
            ("GET", CLUSTER, None, self._get_cluster),
            ("DELETE", CLUSTER, None, self._delete_cluster),
            ("POST", CLUSTER + "/nodePools", container_v1.CreateNodePoolRequest, self._add_pool),
            ("GET", POOL, None, self._get_pool),
            ("DELETE", POOL, None, self._delete_pool),
            ("POST", POOL + ":setSize", container_v1.SetNodePoolSizeRequest, self._set_size),
            ("GET", LOCATION + r"/operations/(?P<operation>[^/]+)", None, self._get_operation),
        ]

    def _create(self, match: re.Match[str], body: dict[str, Any]) -> dict[str, Any]:
        cluster = body.get("cluster", {})
        parent = _location(match)
        path = f"{parent}/clusters/{cluster.get('name', '')}"
        _check_cluster(cluster, match["project"])
        if path in self.clusters:
            raise ApiError("ALREADY_EXISTS", f"Already exists: {path}.")
        pools = [{**pool, "status": "PROVISIONING"} for pool in cluster.get("nodePools", [])]
        self.clusters[path] = {
            **cluster,
            "nodePools": pools,
            "location": match["location"],
            "status": "PROVISIONING",
            "selfLink": f"https://container.googleapis.com/v1/{path}",
        }

        def running() -> None:
            self.clusters[path].update(
                status="RUNNING",
                endpoint="10.0.0.2",
                masterAuth={"clusterCaCertificate": FAKE_CA_CERTIFICATE},
            )
            for pool in pools:
                pool["status"] = "RUNNING"

        return self._start(parent, "CREATE_CLUSTER", path, running)

    def _list(self, match: re.Match[str], _: dict[str, Any]) -> dict[str, Any]:
        parent = _location(match)
        return {"clusters": [c for p, c in self.clusters.items() if p.startswith(parent + "/")]}

    def _get_cluster(self, match: re.Match[str], _: dict[str, Any]) -> dict[str, Any]:
        path = self._existing_cluster(match)
        self._tick(path)
        return self.clusters[path]

    def _delete_cluster(self, match: re.Match[str], _: dict[str, Any]) -> dict[str, Any]:
        path = self._existing_cluster(match)
        self.clusters[path]["status"] = "STOPPING"
        return self._start(
            _location(match), "DELETE_CLUSTER", path, lambda: self.clusters.pop(path)
        )

    def _add_pool(self, match: re.Match[str], body: dict[str, Any]) -> dict[str, Any]:
        cluster_path = self._existing_cluster(match)
        pool = body.get("nodePool", {})
        if not pool.get("name"):
            raise ApiError("INVALID_ARGUMENT", "NodePool.name must be set.")
        path = f"{cluster_path}/nodePools/{pool['name']}"
        if any(p["name"] == pool["name"] for p in self.clusters[cluster_path]["nodePools"]):
            raise ApiError("ALREADY_EXISTS", f"Already exists: {path}.")
        self._idle(cluster_path)
        pool = {**pool, "status": "PROVISIONING"}
        self.clusters[cluster_path]["nodePools"].append(pool)
        return self._start(
            _location(match), "CREATE_NODE_POOL", path, lambda: pool.update(status="RUNNING")
        )

    def _get_pool(self, match: re.Match[str], _: dict[str, Any]) -> dict[str, Any]:
        path, pool = self._existing_pool(match)
        self._tick(path)
        return pool

    def _delete_pool(self, match: re.Match[str], _: dict[str, Any]) -> dict[str, Any]:
        path, pool = self._existing_pool(match)
        pools = self.clusters[self._existing_cluster(match)]["nodePools"]
        pool["status"] = "STOPPING"
        return self._start(_location(match), "DELETE_NODE_POOL", path, lambda: pools.remove(pool))

    def _set_size(self, match: re.Match[str], body: dict[str, Any]) -> dict[str, Any]:
        path, pool = self._existing_pool(match)
        size = body.get("nodeCount", 0)
        # A real pool keeps initialNodeCount; the fake shows the new size there.
        return self._start(
            _location(match), "SET_NODE_POOL_SIZE", path, lambda: pool.update(initialNodeCount=size)
        )

    def _get_operation(self, match: re.Match[str], _: dict[str, Any]) -> dict[str, Any]:
        name = match["operation"]
        if name not in self.operations:
            raise ApiError("NOT_FOUND", f"Not found: operation {name}.")
        self._tick(self.operations[name].target)
        return self.operations[name].json

    # Operations.

    def _start(
        self, parent: str, kind: str, target: str, on_done: Callable[[], None]
    ) -> dict[str, Any]:
        name = f"operation-{next(self._ids)}"
        operation = _Operation(
            json={
                "name": name,
                "operationType": kind,
                "status": "RUNNING",
                "location": parent.rsplit("/", 1)[1],
                "selfLink": f"https://container.googleapis.com/v1/{parent}/operations/{name}",
                "targetLink": f"https://container.googleapis.com/v1/{target}",
            },
            target=target,
            polls_left=self.polls_to_finish,
            on_done=on_done,
            error=self._operation_errors.pop(0) if self._operation_errors else "",
        )
        self.operations[name] = operation
        return dict(operation.json)

    def _tick(self, target: str) -> None:
        """Reading an operation or its target advances the unfinished operations on it."""
        for operation in self.operations.values():
            if operation.target != target or operation.json["status"] == "DONE":
                continue
            operation.polls_left -= 1
            if operation.polls_left > 0:
                continue
            operation.json["status"] = "DONE"
            if operation.error:
                operation.json["error"] = {"code": 9, "message": operation.error}
                self._mark_failed(target, operation.error)
            else:
                operation.on_done()

    def _mark_failed(self, target: str, message: str) -> None:
        cluster_path, _, pool_name = target.partition("/nodePools/")
        thing = self.pool(cluster_path, pool_name) if pool_name else self.clusters[cluster_path]
        thing.update(status="ERROR", statusMessage=message)

    def _idle(self, cluster_path: str) -> None:
        """GKE runs one operation at a time on a cluster and refuses a second one."""
        for name, operation in self.operations.items():
            on_cluster = f"{operation.target}/".startswith(f"{cluster_path}/")
            if on_cluster and operation.json["status"] != "DONE":
                raise ApiError(
                    "FAILED_PRECONDITION", f"Cluster is running incompatible operation {name}."
                )

    def _existing_cluster(self, match: re.Match[str]) -> str:
        path = f"{_location(match)}/clusters/{match['cluster']}"
        if path not in self.clusters:
            raise ApiError("NOT_FOUND", f"Not found: {path}.")
        return path

    def _existing_pool(self, match: re.Match[str]) -> tuple[str, dict[str, Any]]:
        cluster_path = self._existing_cluster(match)
        path = f"{cluster_path}/nodePools/{match['pool']}"
        try:
            return path, self.pool(cluster_path, match["pool"])
        except StopIteration:
            raise ApiError("NOT_FOUND", f"Not found: {path}.") from None


def existing_cluster(name: str = "ml-prod") -> dict[str, Any]:
    """A Standard cluster as GKE reports it, made with gcloud: the default pool, an
    autoscaled L4 GPU pool (2 GPUs a node) and a v5e 4x4 TPU slice placed COMPACT."""
    return {
        "name": name,
        "status": "RUNNING",
        "currentMasterVersion": "1.33.2-gke.1111000",
        "endpoint": "10.0.0.9",
        "masterAuth": {"clusterCaCertificate": FAKE_CA_CERTIFICATE},
        "releaseChannel": {"channel": "REGULAR"},
        "nodePools": [
            {
                "name": "default-pool",
                "config": {"machineType": "e2-standard-4"},
                "initialNodeCount": 1,
                "locations": ["us-central1-a", "us-central1-b", "us-central1-c"],
                "status": "RUNNING",
            },
            {
                "name": "l4-pool",
                "config": {
                    "machineType": "g2-standard-24",
                    "accelerators": [{"acceleratorType": "nvidia-l4", "acceleratorCount": "2"}],
                },
                "initialNodeCount": 2,
                "locations": ["us-central1-a"],
                "autoscaling": {"enabled": True, "minNodeCount": 0, "maxNodeCount": 6},
                "status": "RUNNING",
            },
            {
                "name": "v5e-slice",
                "config": {"machineType": "ct5lp-hightpu-4t"},
                "initialNodeCount": 4,
                "locations": ["us-central1-b"],
                "placementPolicy": {"type": "COMPACT", "tpuTopology": "4x4"},
                "status": "RUNNING",
            },
        ],
    }


def _location(match: re.Match[str]) -> str:
    return f"projects/{match['project']}/locations/{match['location']}"


def _parse_strictly(body: dict[str, Any], request_type: Any) -> None:
    try:
        json_format.ParseDict(body, request_type.pb()(), ignore_unknown_fields=False)
    except json_format.ParseError as error:
        raise ApiError("INVALID_ARGUMENT", f"Invalid JSON payload received. {error}") from None


def _check_cluster(cluster: dict[str, Any], project: str) -> None:
    """The checks GKE makes that the message schema cannot express."""
    if not cluster.get("name"):
        raise ApiError("INVALID_ARGUMENT", "Cluster.name must be set.")
    autopilot = cluster.get("autopilot", {}).get("enabled", False)
    if autopilot and cluster.get("nodePools"):
        raise ApiError("INVALID_ARGUMENT", "Autopilot clusters cannot specify node pools.")
    if not autopilot and not cluster.get("nodePools") and not cluster.get("initialNodeCount"):
        raise ApiError("INVALID_ARGUMENT", "Cluster.initial_node_count must be greater than zero.")
    pool = cluster.get("workloadIdentityConfig", {}).get("workloadPool")
    if pool not in (None, f"{project}.svc.id.goog"):
        raise ApiError("INVALID_ARGUMENT", f"Workload pool must be {project}.svc.id.goog.")


def _handler_for(fake: FakeGke) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                status, answer = 400, ApiError("INVALID_ARGUMENT", "Invalid JSON payload.").body()
            else:
                status, answer = fake.handle(self.command, urlsplit(self.path).path, body)
            payload = json.dumps(answer).encode()
            self.send_response(status, HTTPStatus(status).phrase)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_DELETE = _serve

        def log_message(self, *args: object) -> None:
            """Quiet: tests read `fake.calls` instead."""

    return Handler
