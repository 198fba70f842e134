"""Scenario files (shared/scenarios/FORMAT.md) run through the same services as the API.

Each scenario runs in a transaction that is rolled back at the end, so a replay leaves the
database as it found it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from django.db import transaction

from clusters import services as cluster_services
from clusters.catalog import CatalogError
from clusters.models import Cluster
from events.models import Event
from events.services import serialize
from workloads import admission, services, status
from workloads.durations import parse_duration
from workloads.manifests import Document, ManifestError
from workloads.manifests.fields import Fields
from workloads.quantities import QuantityError, parse_quantity

START = datetime(2026, 1, 1, tzinfo=UTC)
ACTIONS = ("apply", "scale", "delete", "advance", "finish", "fail", "expect")
QUANTITY_FIELDS = ("usage", "borrowed")
BY_FLAVOR_FIELD = "usageByFlavor"  # flavor -> resource -> quantity
# Replay runs on its own clock: admission at each step's instant, never by a worker later.
NOW = services.Admit.NOW


class ScenarioError(ValueError):
    """The scenario file itself is wrong (not a step of it)."""


class StepError(Exception):
    """A step was refused; nothing it asked for was applied."""


@dataclass
class Report:
    scenario: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(not s.get("failures") for s in self.steps)

    def as_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "ok": self.ok,
            "steps": self.steps,
            "events": self.events,
        }


def load(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ScenarioError(f"{path}: {error}") from error
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario is a mapping with name, cluster and steps")
    for key, kind in (("name", str), ("cluster", dict), ("steps", list)):
        if not isinstance(data.get(key), kind):
            raise ScenarioError(f"{path}: '{key}' must be a {kind.__name__}")
    if not isinstance(data.get("configuration", {}), dict):
        raise ScenarioError(f"{path}: 'configuration' must be a Kueue Configuration document")
    for index, step in enumerate(data["steps"]):
        actions = [a for a in ACTIONS if isinstance(step, dict) and a in step]
        if len(actions) != 1:
            raise ScenarioError(
                f"{path}: steps[{index}] must have exactly one of {', '.join(ACTIONS)}"
            )
    return data


def run(path: Path) -> Report:
    data = load(path)
    report = Report(data["name"])
    with transaction.atomic():
        runner = _Runner(path, data, report)
        runner.run()
        logged = Event.objects.filter(pk__gt=runner.first_event).order_by("id")
        report.events = [_event_json(seq, event) for seq, event in enumerate(logged, start=1)]
        transaction.set_rollback(True)
    return report


def _event_json(seq: int, event: Event) -> dict[str, Any]:
    """As the log would show it: the scenario's events are rolled back with it, unnumbered,
    so their seq is their place in the scenario."""
    data = serialize(event) | {"seq": seq}
    return {k: data[k] for k in ("seq", "at", "kind", "object", "workload", "message")}


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


class _Runner:
    def __init__(self, path: Path, data: dict[str, Any], report: Report):
        self.path, self.data, self.report = path, data, report
        self.now = START
        last = Event.objects.order_by("-pk").first()
        self.first_event = last.pk if last else 0
        self.cluster = self._make_cluster(data["cluster"])
        if "configuration" in data:
            self._configure(data["configuration"])

    def _make_cluster(self, spec: Mapping[str, Any]) -> Cluster:
        name = str(spec.get("name") or self.data["name"])
        if Cluster.objects.filter(name=name).exists():
            name = f"{name}-replay"
        cluster = Cluster.objects.create(name=name, status=Cluster.Status.RUNNING)
        for index, pool in enumerate(spec.get("nodePools") or ()):
            try:
                cluster_services.provision_now(
                    cluster,
                    name=str(pool["name"]),
                    machine_type=str(pool["machineType"]),
                    node_count=int(pool["nodes"]),
                    tpu_topology=str(pool.get("tpuTopology") or ""),
                    block=str(pool.get("block") or ""),
                    at=self.now,
                )
            except (KeyError, ValueError, TypeError, CatalogError) as error:
                raise ScenarioError(f"{self.path}: cluster.nodePools[{index}]: {error}") from error
        return cluster

    def _configure(self, document: Mapping[str, Any]) -> None:
        """The scenario's Kueue Configuration, applied (and validated) as the API applies it."""

        def only_configuration(doc: Document) -> None:
            if doc.kind != "Configuration":
                raise Fields.of(doc).error("kind", doc.kind, "must be Configuration")

        try:
            services.apply(
                self.cluster,
                yaml.safe_dump(dict(document), sort_keys=False),
                source="configuration",
                now=self.now,
                authorize=only_configuration,
                admit=NOW,
            )
        except ManifestError as error:
            raise ScenarioError(f"{self.path}: {error}") from error

    def run(self) -> None:
        for index, step in enumerate(self.data["steps"]):
            action = next(a for a in ACTIONS if a in step)
            entry: dict[str, Any] = {"index": index, "action": action}
            failures: list[dict[str, Any]] = []
            try:
                if action == "expect":
                    failures = self._expect(step["expect"])
                else:
                    self._do(action, step)
                if step.get("expectRejected"):
                    failures.append(
                        {"object": "", "field": "rejected", "expected": True, "actual": False}
                    )
            except StepError as error:
                entry["error"] = str(error)
                if not step.get("expectRejected"):
                    failures.append(
                        {"object": "", "field": "error", "expected": None, "actual": str(error)}
                    )
            entry["at"] = _iso(self.now)
            entry["objects"] = status.cluster_status(self.cluster)
            entry["failures"] = failures
            self.report.steps.append(entry)

    def _do(self, action: str, step: Mapping[str, Any]) -> None:
        handlers: dict[str, Callable[[Any], None]] = {
            "apply": lambda v: self._apply(v, step),
            "scale": self._scale,
            "delete": lambda v: self._with_object(
                v, lambda o: services.delete(o, self.now, admit=NOW)
            ),
            "advance": self._advance,
            "finish": lambda v: self._with_object(
                v, lambda o: services.end(o, self.now, failed=False, admit=NOW)
            ),
            "fail": lambda v: self._with_object(
                v, lambda o: services.end(o, self.now, failed=True, admit=NOW)
            ),
        }
        try:
            if action == "apply":
                handlers[action](step[action])  # atomic itself, and records its refusal
            else:
                # A savepoint: a refused step changes nothing, the scenario goes on.
                with transaction.atomic():
                    handlers[action](step[action])
        except (ManifestError, services.ObjectNotFound, QuantityError, ValueError) as error:
            raise StepError(str(error)) from error

    def _apply(self, value: Any, step: Mapping[str, Any]) -> None:
        if isinstance(value, dict) and "manifest" in value:
            text, source = str(value["manifest"]), "inline manifest"
        else:
            file = (self.path.parent / str(value)).resolve()
            try:
                text, source = file.read_text(), str(value)
            except OSError as error:
                raise StepError(f"{value}: {error.strerror}") from error
        services.apply(
            self.cluster,
            text,
            source=source,
            now=self.now,
            namespace=step.get("namespace"),
            substitutions={str(k): str(v) for k, v in (step.get("substitute") or {}).items()},
            simulation=self.data.get("simulation") or {},
            admit=NOW,
        )

    def _target(self, value: Any) -> Any:
        if not isinstance(value, dict) or "kind" not in value or "name" not in value:
            raise StepError(f"{value!r}: give kind, name and (for namespaced kinds) namespace")
        return services.get_object(
            self.cluster, str(value["kind"]), str(value.get("namespace") or ""), str(value["name"])
        )

    def _with_object(self, value: Any, action: Callable[[Any], None]) -> None:
        action(self._target(value))

    def _scale(self, value: Any) -> None:
        replicas = value.get("replicas") if isinstance(value, dict) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise StepError(f"scale.replicas: {replicas!r} is not a non-negative integer")
        services.scale(self._target(value), replicas, self.now, admit=NOW)

    def _advance(self, value: Any) -> None:
        end = self.now + timedelta(seconds=parse_duration(value))
        admission.advance(self.cluster, self.now, end)
        self.now = end

    def _expect(self, expected: Any) -> list[dict[str, Any]]:
        if not isinstance(expected, dict):
            raise StepError("expect: a mapping of object keys to expected fields")
        actual = status.cluster_status(self.cluster)
        failures = []
        for key, fields in expected.items():
            for name, want in (fields or {}).items():
                got = actual.get(key, {}).get(name)
                try:
                    matches = _matches(name, want, got, where=f"expect.{key}.{name}")
                except QuantityError as error:
                    raise StepError(str(error)) from error
                if not matches:
                    failures.append({"object": key, "field": name, "expected": want, "actual": got})
        return failures


def _matches(name: str, want: Any, got: Any, *, where: str) -> bool:
    if name in QUANTITY_FIELDS and isinstance(want, dict):
        return _quantities_match(want, got, where)
    if name == BY_FLAVOR_FIELD and isinstance(want, dict):
        return isinstance(got, dict) and all(
            _quantities_match(resources, got.get(str(flavor), {}), f"{where}.{flavor}")
            for flavor, resources in want.items()
        )
    return bool(want == got)


def _quantities_match(want: Any, got: Any, where: str) -> bool:
    """Resource -> quantity, compared as quantities; a resource missing from `got` is 0."""
    if not isinstance(want, dict):
        raise QuantityError(where, want, "must map resource names to quantities")
    if not isinstance(got, dict):
        return False
    return all(  # the expected ones are read as any quantity; status ones are sums: unbounded
        parse_quantity(str(v), field=f"{where}.{r}")
        == parse_quantity(str(got.get(r, "0")), field=f"{where}.{r}", bounded=False)
        for r, v in want.items()
    )
