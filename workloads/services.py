"""Every change users make to queues and workloads: `kubectl apply`, scale, delete, finish."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.db.models import BigIntegerField, QuerySet, Value
from kubernetes import client

from clusters.models import Cluster
from controlplane import bulk
from controlplane.prepared import Keys, Param, Prepared
from events.audit import record_audit
from events.services import deferred_events, record_event, record_events
from workloads import admission, live, manifests, pods, runtime, slicing, tasks
from workloads.durations import parse_duration
from workloads.history import object_event, workload_event, workload_event_row
from workloads.kube import apply as kube_apply
from workloads.kube import client as kube_client
from workloads.kube.apply import ObjectRef
from workloads.kube.client import KubeError
from workloads.manifests import Document, ManifestError, WorkloadShape
from workloads.manifests.fields import Fields
from workloads.models import (
    QUEUE_MODELS,
    KubeObject,
    Pod,
    PriorityClass,
    Workload,
    WorkloadPriorityClass,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

QUEUE_KINDS = frozenset(QUEUE_MODELS)
# The API version of a queue object made in the UI (no manifest), to delete it on a cluster.
KUEUE = "kueue.x-k8s.io/v1beta2"
_API_VERSIONS = {"PriorityClass": "scheduling.k8s.io/v1"}
# Kueue's webhooks name workloads <prefix>-<object>-<hash>.
WORKLOAD_PREFIX = {"Job": "job", "JobSet": "jobset", "Deployment": "pod", "LeaderWorkerSet": "lws"}
# (field, sim.accelplane.dev annotation, scenario `simulation` key), FORMAT.md's table.
SIM_FIELDS = (
    ("startup", "startup", "startup"),
    ("step_time", "step-time", "stepTime"),
    ("total_steps", "total-steps", "totalSteps"),
    ("checkpoint_every", "checkpoint-every", "checkpointEvery"),
)
SIM_DEFAULTS = {"startup": 30.0, "step_time": 10.0, "total_steps": 0, "checkpoint_every": 100}
# Kueue's DefaultWorkloadPriorityClassName (pkg/controller/constants).
DEFAULT_WORKLOAD_PRIORITY_CLASS = "default"


class ObjectNotFound(LookupError):
    pass


class Admit(Enum):
    """When admission runs after a change to a simulated cluster (Kueue admits on a real one)."""

    NOW = "now"
    """Here, before returning, whatever ACCELPLANE_ADMISSION says (what-if, replay)."""
    AS_CONFIGURED = "as_configured"
    """ACCELPLANE_ADMISSION: here and now ("request"), or by a worker soon after ("worker"),
    where one run admits a whole burst of submissions."""
    SKIP = "skip"
    """Not at all: the caller runs admission itself, when it chooses (tests, benchmarks)."""
    DRY_RUN = "dry_run"
    """What-if: nothing is sent to a real cluster's apiserver, and admission runs here and
    now even on a real cluster, deciding from its mirrored state as Kueue would."""


@dataclass(frozen=True, slots=True)
class Applied:
    key: str
    action: str  # created | configured | unchanged
    pk: int
    """Of the stored row: a KubeObject, or the Kueue kind's own model for queue objects."""
    stored: KubeObject | None = None
    """A workload object this apply created, as it stored it (its `cluster` loaded)."""
    workloads: tuple[Workload, ...] = ()
    """`stored`'s Kueue workloads as it stored them, in replica order."""

    @property
    def kind(self) -> str:
        return self.key.partition("/")[0]


@dataclass(frozen=True, slots=True)
class _Plan:
    document: Document
    spec: dict[str, Any] | None
    shape: WorkloadShape | None


def apply(
    cluster: Cluster,
    text: str | bytes,
    *,
    source: str,
    now: datetime,
    namespace: str | None = None,
    substitutions: Mapping[str, str] | None = None,
    simulation: Mapping[str, Mapping[str, Any]] | None = None,
    admit: Admit = Admit.AS_CONFIGURED,
    authorize: Callable[[Document], None] | None = None,
    actor: User | None = None,
) -> list[Applied]:
    """`kubectl apply`: validate every document first, then create or update all, atomically.

    `authorize` sees every document before anything is written and raises to refuse one.
    Each Kueue object `actor` changes is audited (before and after) in the same transaction.
    Admission then runs at `now` as `admit` says.
    """
    try:
        documents = manifests.load_documents(
            text, source=source, default_namespace=namespace, substitutions=substitutions
        )
        if authorize is not None:
            for doc in documents:
                authorize(doc)
        plans = [_plan(doc) for doc in documents]
        manifests.check_pods_per_request((p.document, p.shape) for p in plans if p.shape)
        with _change(cluster, admit):
            lookups = _Lookups(cluster, documents)
            new = _NewObjects(now)
            applied = [
                _apply_one(lookups, plan, now, simulation or {}, actor, new) for plan in plans
            ]
            new.insert()
            results = [a if isinstance(a, Applied) else a.applied() for a in applied]
            # Last, so that a refusal by the apiserver rolls all of it back.
            with _on_cluster(cluster, dry_run=admit is Admit.DRY_RUN) as api:
                if api is not None:
                    for doc in documents:
                        # Kueue objects are never forced: a field another manager owns is a
                        # conflict for the admin (409), not a silent takeover.
                        force = doc.kind not in QUEUE_KINDS
                        kube_apply.apply(api, doc.body, doc.namespace or "", force=force)
    except (ManifestError, KubeError) as error:
        # Nothing of the request was stored; the refusal itself is part of the history.
        where = (
            {"source": error.source, "document": error.document, "path": error.path}
            if isinstance(error, ManifestError)
            else {}
        )
        record_event(
            "workload.rejected",
            at=now,
            cluster=cluster.name,
            namespace=namespace or "",
            object_key=getattr(error, "object", "") or "",
            message=str(error),
            **where,
        )
        raise
    _admit(cluster, now, admit)
    return results


@contextmanager
def _change(cluster: Cluster, admit: Admit) -> Iterator[None]:
    """The transaction of a change that `_admit` follows, its events inserted together at its
    end. When that queues a worker's settle, the settle numbers them (tasks.settle_cluster):
    the change commits without numbering (seven statements on PostgreSQL, in a request)."""
    with transaction.atomic(), deferred_events(numbered_later=_settled_by_worker(cluster, admit)):
        yield


def _admit(cluster: Cluster, now: datetime, admit: Admit) -> None:
    """Admission after a change. On a real cluster Kueue admits; what it decides comes back
    through the watch (workloads/kube)."""
    simulated = cluster.provider == Cluster.Provider.SIM
    if admit is Admit.SKIP or (not simulated and admit is not Admit.DRY_RUN):
        return
    if not simulated:
        # Kueue's decision only: the simulator must not run a real cluster's pods.
        admission.admit_pending(cluster, now)
    elif _settled_by_worker(cluster, admit):
        tasks.admit_soon(cluster)
    else:
        admission.settle(cluster, now)


def _settled_by_worker(cluster: Cluster, admit: Admit) -> bool:
    """Whether `_admit` queues a worker's settle of the cluster rather than admitting itself."""
    simulated = cluster.provider == Cluster.Provider.SIM
    return simulated and admit is Admit.AS_CONFIGURED and not admits_in_request(cluster)


def admits_in_request(cluster: Cluster) -> bool:
    """Whether `apply` (as configured) runs admission before it returns, changing what it
    stored: on a simulated cluster unless workers admit (ACCELPLANE_ADMISSION=worker)."""
    return cluster.provider == Cluster.Provider.SIM and settings.ACCELPLANE_ADMISSION != "worker"


class _Lookups:
    """What one request reads over and over, read once (and again after it changes)."""

    def __init__(self, cluster: Cluster, documents: list[Document]):
        self.cluster = cluster
        self._priorities: dict[tuple[str, str], int] | None = None
        self._default: tuple[int, str] | None = None
        names = {doc.name for doc in documents if doc.kind not in QUEUE_KINDS}
        existing = []
        if names:
            # Most submissions create their objects: which exist is asked by a prepared
            # query, and only those that do are loaded. Most of these objects are workloads,
            # each given a priority, so the priority classes come in the same statement: a
            # round trip less for a submission, a few rows more for a request of none.
            rows = _EXISTING_AND_PRIORITIES.rows(cluster=cluster.pk, names=names)
            existing = [row[4] for row in rows if row[4] is not None]
            self._read_priorities(rows)
        # Unordered: a dict by key.
        self.objects = {
            (o.kind, o.namespace, o.name): o
            for o in (
                KubeObject.objects.filter(pk__in=bulk.key_set(existing)).order_by()
                if existing
                else ()
            )
        }

    def changed(self, kind: str) -> None:
        if kind in ("WorkloadPriorityClass", "PriorityClass"):
            self._priorities = self._default = None

    def priority(self, kind: str, name: str) -> int | None:
        if self._priorities is None:
            # Not read yet, or changed by this request (`changed`): read, with no objects.
            self._read_priorities(_EXISTING_AND_PRIORITIES.rows(cluster=self.cluster.pk, names=()))
        assert self._priorities is not None
        return self._priorities.get((kind, name))

    def _read_priorities(self, rows: list[tuple[str, str, int, bool, int | None]]) -> None:
        """From `_EXISTING_AND_PRIORITIES`' rows: those without a key are priority classes."""
        classes = [row[:4] for row in rows if row[4] is None]
        self._priorities = {(kind, name): value for kind, name, value, _ in classes}
        defaults = sorted((value, name) for _, name, value, is_default in classes if is_default)
        self._default = defaults[0] if defaults else (0, "")

    def default_priority(self) -> tuple[int, str]:
        self.priority("", "")
        assert self._default is not None
        return self._default


# Built once (controlplane/prepared.py): every submission asks it. Rows of (kind, name, value,
# whether it is the default, primary key): the cluster's objects named `names` (kind, name,
# value and default blank; only the key is read), then its priority classes of both kinds (no
# key). order_by(): SQLite takes no ORDER BY (the models' default) inside a UNION.
_NONE = Value(None, output_field=BigIntegerField())
_EXISTING_AND_PRIORITIES = Prepared(
    lambda: (
        KubeObject.objects.filter(cluster_id=Param("cluster"), name__in=Keys("names", text=True))
        .order_by()
        .values_list(Value(""), Value(""), Value(0), Value(False), "pk")
        .union(
            WorkloadPriorityClass.objects.filter(cluster_id=Param("cluster"))
            .order_by()
            .values_list(Value("WorkloadPriorityClass"), "name", "value", Value(False), _NONE),
            PriorityClass.objects.filter(cluster_id=Param("cluster"))
            .order_by()
            .values_list(Value("PriorityClass"), "name", "value", "global_default", _NONE),
            all=True,
        )
    )
)


def _plan(doc: Document) -> _Plan:
    if doc.kind in QUEUE_KINDS:
        return _Plan(doc, manifests.queue_spec(doc), None)
    return _Plan(doc, None, manifests.workload_shape(doc))


def _apply_one(
    lookups: _Lookups,
    plan: _Plan,
    now: datetime,
    simulation: Mapping[str, Mapping[str, Any]],
    actor: User | None,
    new: _NewObjects,
) -> Applied | _NewObject:
    """The document applied, or, for a new object, added to `new` to be inserted with the
    request's other new objects. Whatever else changes is written after those added before."""
    doc, cluster = plan.document, lookups.cluster
    if plan.spec is not None:
        new.insert()
        lookups.changed(doc.kind)
        return _apply_queue_object(cluster, doc, plan.spec, now, actor)
    existing = lookups.objects.get((doc.kind, doc.namespace or "", doc.name))
    if existing is not None:
        _refuse_foreign(existing)
    if existing is not None and existing.manifest == doc.body:
        return Applied(doc.key, "unchanged", existing.pk)
    sim = _simulation(doc, plan.shape, simulation.get(doc.key, {}))
    if existing is None:
        obj = KubeObject(
            cluster=cluster,
            api_version=doc.api_version,
            kind=doc.kind,
            namespace=doc.namespace or "",
            name=doc.name,
            manifest=doc.body,
            simulation=sim,
            created_at=now,
            updated_at=now,
        )
        priority = None
        if plan.shape is not None and plan.shape.queue_name:
            # Read now, in document order: a missing priority class is refused as it would
            # be one document at a time.
            priority = _priority(lookups, doc, plan.shape)
        return new.add(doc, obj, plan.shape, priority)
    new.insert()
    obj = existing
    if plan.shape is not None and _only_replicas_changed(existing.manifest, doc.body):
        _scale_to(obj, plan.shape.replicas, now, doc.body, lookups)
        return Applied(doc.key, "configured", obj.pk)
    _remove_workloads(obj, now)
    obj.manifest, obj.simulation, obj.generation = doc.body, sim, obj.generation + 1
    obj.api_version, obj.updated_at = doc.api_version, now
    obj.save()
    object_event("object.configured", obj, now, message=f"{obj.key} configured")
    if plan.shape is not None:
        _create_workloads(obj, plan.shape, range(plan.shape.replicas), now, lookups, doc)
    return Applied(doc.key, "configured", obj.pk)


@dataclass(frozen=True, slots=True)
class _NewObject:
    document: Document
    obj: KubeObject
    """Unsaved until `_NewObjects.insert`."""
    shape: WorkloadShape | None
    priority: tuple[int, str] | None
    """(value, class name) of its workloads; None when it is not queued."""
    workloads: list[Workload] = dataclasses.field(default_factory=list)
    """Its Kueue workloads, once inserted."""

    def applied(self) -> Applied:
        return Applied(self.document.key, "created", self.obj.pk, self.obj, tuple(self.workloads))


class _NewObjects:
    """The objects one apply creates, inserted together: their KubeObjects in one INSERT and
    their workloads in another, instead of two per document. Rows, pods and events are as
    one document at a time makes them, in the same order."""

    def __init__(self, now: datetime):
        self.now = now
        self.pending: list[_NewObject] = []

    def add(
        self,
        doc: Document,
        obj: KubeObject,
        shape: WorkloadShape | None,
        priority: tuple[int, str] | None,
    ) -> _NewObject:
        new = _NewObject(doc, obj, shape, priority)
        self.pending.append(new)
        return new

    def insert(self) -> None:
        """Every object added since the last call, with its workloads, pods and events."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        now = self.now
        # Primary keys come back (RETURNING): workload and pod names hash them.
        bulk.create([new.obj for new in pending])
        rows: list[list[Workload]] = []
        for new in pending:
            if new.shape is None or new.priority is None:
                rows.append([])
                continue
            replicas = range(new.shape.replicas)
            rows.append(_workload_rows(new.obj, new.shape, replicas, now, *new.priority))
        bulk.create([row for object_rows in rows for row in object_rows])
        for new, object_rows in zip(pending, rows, strict=True):
            new.workloads.extend(object_rows)
            obj, shape = new.obj, new.shape
            object_event("object.created", obj, now, message=f"{obj.key} created")
            if shape is None:
                continue
            if new.priority is not None:
                _workloads_created(obj, shape, object_rows, now)
            elif obj.cluster.provider == Cluster.Provider.SIM:
                # Not queued: its pods go straight to kube-scheduler (the simulator's only).
                pods.create_unmanaged(obj, _pod_sets(shape), range(shape.replicas), now)


class ManagedElsewhere(ValueError):
    """An apply or delete of a Kueue object read from the cluster that no admin adopted."""


def _queue_row(
    cluster: Cluster, doc: Document, spec: Mapping[str, Any]
) -> tuple[type[Any], dict[str, Any], dict[str, Any]]:
    """The model, the lookup of the document's row and the columns its spec fills."""
    model = QUEUE_MODELS[doc.kind]
    lookup: dict[str, Any] = {"cluster": cluster, "name": doc.name}
    if model.NAMESPACED:
        lookup["namespace"] = doc.namespace
    columns = _queue_columns(doc.kind, spec)
    if model.SINGLETON:
        # One per cluster: applying one under another name replaces it.
        lookup, columns = {"cluster": cluster}, {**columns, "name": doc.name}
    return model, lookup, columns


def refuse_unadopted(row: Any) -> None:
    if row is not None and row.managed_elsewhere:
        raise ManagedElsewhere(
            f"{row.key} is managed elsewhere (it was read from cluster {row.cluster.name}); "
            "an admin must adopt it before Accelplane changes it"
        )


def _refuse_foreign(obj: KubeObject) -> None:
    if obj.managed_elsewhere:
        raise ManagedElsewhere(
            f"{obj.key} was not submitted through Accelplane (it is managed elsewhere); "
            "change it where it was made"
        )


def _apply_queue_object(
    cluster: Cluster, doc: Document, spec: dict[str, Any], now: datetime, actor: User | None
) -> Applied:
    model, lookup, columns = _queue_row(cluster, doc, spec)
    row = model._default_manager.filter(**lookup).select_related("cluster").first()
    refuse_unadopted(row)
    if row is not None and row.spec == spec and row.manifest == doc.body and row.name == doc.name:
        return Applied(doc.key, "unchanged", row.pk)
    before = None if row is None else rendered(row)
    if row is None:
        row = model._default_manager.create(
            **lookup, **columns, spec=spec, manifest=doc.body, created_at=now, updated_at=now
        )
        action = "created"
    else:
        model._default_manager.filter(pk=row.pk).update(
            **columns, spec=spec, manifest=doc.body, updated_at=now
        )
        action = "configured"
    after = manifests.render(doc.kind, doc.name, lookup.get("namespace"), spec)
    _record_queue_change(
        cluster, doc.kind, doc.namespace, doc.key, action, now, actor, before=before, after=after
    )
    # Queue, flavor or cohort changes may make room: Kueue requeues inadmissible workloads.
    runtime.unpark(cluster, now)
    return Applied(doc.key, action, row.pk)


def observe_queue_object(
    cluster: Cluster, doc: Document, spec: dict[str, Any], now: datetime
) -> None:
    """A Kueue object as its cluster's watch reads it: a new one is managed elsewhere until
    adopted; the spec of every row follows the cluster (Kueue admits by it), the manifest of
    one Accelplane applied stays as applied."""
    model, lookup, columns = _queue_row(cluster, doc, spec)
    # get_or_create: Accelplane's own apply of the object may be committing at this moment.
    row, created = model._default_manager.get_or_create(
        **lookup,
        defaults={
            **columns,
            "spec": spec,
            "manifest": doc.body,
            "managed_elsewhere": True,
            "created_at": now,
            "updated_at": now,
        },
    )
    if created or (row.spec == spec and row.name == doc.name):
        return
    changed = {**columns, "spec": spec, "updated_at": now}
    if row.managed_elsewhere:
        changed["manifest"] = doc.body
    model._default_manager.filter(pk=row.pk).update(**changed)


def forget_queue_objects(cluster: Cluster, kind: str, keep: Iterable[tuple[str, str]]) -> None:
    """Objects managed elsewhere that are gone from the cluster: all of `kind` but `keep`
    ((namespace, name) pairs; namespace "" for cluster-scoped kinds). A row Accelplane owns
    stays: it is deleted through Accelplane."""
    model = QUEUE_MODELS[kind]
    kept = set(keep)
    rows = model._default_manager.filter(cluster=cluster, managed_elsewhere=True)
    gone = [row.pk for row in rows if (getattr(row, "namespace", ""), row.name) not in kept]
    model._default_manager.filter(pk__in=gone).delete()


def adopt_queue_object(
    cluster: Cluster,
    kind: str,
    name: str,
    namespace: str | None,
    now: datetime,
    *,
    actor: User | None = None,
) -> Any:
    """An admin takes over a Kueue object read from the cluster: from now on Accelplane's
    applies change it, by server-side apply as its field manager, without forcing: a field
    another manager (kubectl, Helm) owns is a conflict to resolve, never taken silently."""
    with transaction.atomic():
        row = _locked_queue_object(cluster, kind, name, namespace)
        if not row.managed_elsewhere:
            return row
        row.managed_elsewhere = False
        row.updated_at = now
        row.save(update_fields=["managed_elsewhere", "updated_at"])
        _record_queue_change(
            cluster,
            kind,
            namespace,
            row.key,
            "adopted",
            now,
            actor,
            message=f"{row.key} adopted: Accelplane applies its changes from now on",
            after=rendered(row),
        )
    return row


def _record_queue_change(
    cluster: Cluster,
    kind: str,
    namespace: str | None,
    key: str,
    action: str,
    now: datetime,
    actor: User | None,
    *,
    message: str = "",
    before: Any = None,
    after: Any = None,
) -> None:
    """The `<kind>.<action>` event (message by default "<key> <action>") and the actor's
    audit entry for a change to a Kueue object."""
    record_event(
        f"{kind.lower()}.{action}",
        at=now,
        cluster=cluster.name,
        namespace=namespace or "",
        object_key=key,
        message=message or f"{key} {action}",
    )
    record_audit(actor, action, key, cluster=cluster.name, before=before, after=after)


def _locked_queue_object(cluster: Cluster, kind: str, name: str, namespace: str | None) -> Any:
    """The stored `kind` object, row-locked for the caller's transaction; ObjectNotFound if
    there is none (namespace is ignored for cluster-scoped kinds)."""
    model = QUEUE_MODELS[kind]
    lookup: dict[str, Any] = {"cluster": cluster, "name": name}
    if model.NAMESPACED:
        lookup["namespace"] = namespace or ""
    row = model._default_manager.select_for_update().filter(**lookup).first()
    if row is None:
        raise ObjectNotFound(f"{kind} {name} not found in cluster {cluster.name}")
    return row


def rendered(row: Any) -> dict[str, Any]:
    """A stored Kueue (or priority) object's manifest in Kueue's storage version."""
    namespace = row.namespace if row.NAMESPACED else None
    return manifests.render(row.KIND, row.name, namespace, row.spec)


def _queue_columns(kind: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    if kind == "ClusterQueue":
        return {"cohort_name": spec.get("cohort") or ""}
    if kind == "Cohort":
        return {"parent_name": spec.get("parent") or ""}
    if kind == "LocalQueue":
        return {"cluster_queue_name": spec["cluster_queue"]}
    if kind == "WorkloadPriorityClass":
        return {"value": spec["value"]}
    if kind == "PriorityClass":
        return {"value": spec["value"], "global_default": spec["global_default"]}
    return {}


def _simulation(
    doc: Document, shape: WorkloadShape | None, override: Mapping[str, Any]
) -> dict[str, Any]:
    """Scenario entry, else the manifest's own checkpoint cadence (env, --save_steps), else
    sim.accelplane.dev annotations, else defaults (docs/scenarios.md)."""
    from_annotations = shape.sim if shape else {}
    sim: dict[str, Any] = dict(SIM_DEFAULTS)
    startup_probe = max((p.startup_seconds for p in shape.pod_sets), default=0) if shape else 0
    sim["startup"] = max(SIM_DEFAULTS["startup"], startup_probe)
    for field, annotation, _ in SIM_FIELDS:
        if annotation in from_annotations:
            sim[field] = _sim_value(field, from_annotations[annotation], doc, annotation)
    if shape is not None and shape.checkpoint_steps is not None:
        sim["checkpoint_every"] = shape.checkpoint_steps
    by_scenario_key = {key: field for field, _, key in SIM_FIELDS}
    for key, value in override.items():
        field = by_scenario_key.get(key, key)
        sim[field] = _sim_value(field, value, doc, key)
    return sim


def _sim_value(field: str, value: Any, doc: Document, name: str) -> float | int:
    """A simulation setting the clock can run: durations, a positive step time, counts >= 0."""
    try:
        if field in ("startup", "step_time"):
            number: float | int = parse_duration(value)
        elif isinstance(value, bool) or int(value) != float(value):
            raise ValueError(value)
        else:
            number = int(value)
    except (TypeError, ValueError):
        raise _invalid_simulation(doc, name, value, "is not a duration or a whole number") from None
    if number < 0 or (field == "step_time" and number == 0):
        raise _invalid_simulation(
            doc, name, value, "must be positive" if field == "step_time" else "must not be negative"
        )
    return number


def _invalid_simulation(doc: Document, name: str, value: Any, problem: str) -> ManifestError:
    return Fields.of(doc).error(f"simulation.{name}", value, f"{value!r} {problem}")


def _only_replicas_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    def without_replicas(body: Mapping[str, Any]) -> dict[str, Any]:
        spec = {k: v for k, v in (body.get("spec") or {}).items() if k != "replicas"}
        return {**body, "spec": spec}

    return without_replicas(old) == without_replicas(new)


def _priority(lookups: _Lookups, doc: Document, shape: WorkloadShape) -> tuple[int, str]:
    """Kueue's order: WorkloadPriorityClass label, else the WorkloadPriorityClass `default`,
    pod PriorityClass, global default, 0."""
    if not shape.priority_class:
        # Kueue's webhooks label the object with the WorkloadPriorityClass `default` when it
        # exists (gate WorkloadPriorityClassDefaulting, beta and on: jobframework
        # `ApplyDefaultWorkloadPriorityClass`).
        value = lookups.priority("WorkloadPriorityClass", DEFAULT_WORKLOAD_PRIORITY_CLASS)
        if value is not None:
            return value, DEFAULT_WORKLOAD_PRIORITY_CLASS
    sources = (
        (
            "WorkloadPriorityClass",
            shape.priority_class,
            "metadata.labels[kueue.x-k8s.io/priority-class]",
        ),
        ("PriorityClass", shape.pod_priority_class, "spec.template.spec.priorityClassName"),
    )
    for kind, name, path in sources:
        if name:
            value = lookups.priority(kind, name)
            if value is None:
                raise _missing_priority(doc, path, name, kind)
            return value, name
    return lookups.default_priority()


def _missing_priority(doc: Document, path: str, name: str, kind: str) -> ManifestError:
    return Fields.of(doc).error(path, name, f"{kind} {name!r} does not exist")


def _create_workloads(
    obj: KubeObject,
    shape: WorkloadShape,
    replicas: range,
    now: datetime,
    lookups: _Lookups,
    doc: Document,
) -> None:
    if not shape.queue_name:
        # A real cluster's pods come from its watch (kube/mirror.py), never from the simulator.
        if obj.cluster.provider == Cluster.Provider.SIM:
            pods.create_unmanaged(obj, _pod_sets(shape), replicas, now)
        return
    priority, priority_class = _priority(lookups, doc, shape)
    rows = _workload_rows(obj, shape, replicas, now, priority, priority_class)
    # One INSERT for every replica's workload (a Deployment's pod each, an LWS's group each).
    bulk.create(rows)
    _workloads_created(obj, shape, rows, now)


def _pod_sets(shape: WorkloadShape) -> list[dict[str, Any]]:
    return [asdict(p) for p in shape.pod_sets]


def _workload_rows(
    obj: KubeObject,
    shape: WorkloadShape,
    replicas: range,
    now: datetime,
    priority: int,
    priority_class: str,
) -> list[Workload]:
    """Unsaved: the Kueue workloads of a queued object's `replicas` (`obj` saved)."""
    assert shape.queue_name, "an object without a queue-name label has no workloads"
    pod_sets = _pod_sets(shape)
    indexes = replicas if shape.per_replica else range(1)
    return [
        Workload(
            cluster=obj.cluster,
            owner=obj,
            namespace=obj.namespace,
            name=_workload_name(obj, shape, index, now),
            replica_index=index,
            queue_name=shape.queue_name,
            priority=priority,
            priority_class_name=priority_class,
            pod_sets=pod_sets,
            queued_at=now,
        )
        for index in indexes
    ]


def _workloads_created(
    obj: KubeObject, shape: WorkloadShape, rows: list[Workload], now: datetime
) -> None:
    """The gated pods and events of workloads just inserted."""
    # A real cluster's pods come from its watch (kube/mirror.py), never from the simulator.
    gated = obj.cluster.provider == Cluster.Provider.SIM and pods.is_pod_owned(obj)
    for row in rows:
        if gated:
            pods.create_gated(row, now)
        workload_event(
            "workload.submitted",
            row,
            now,
            queue=shape.queue_name,
            priority=row.priority,
            message=f"workload {row.name} submitted to LocalQueue {shape.queue_name}",
        )


def _workload_name(obj: KubeObject, shape: WorkloadShape, index: int, now: datetime) -> str:
    suffix = pods.short_hash(obj.pk, obj.generation, index, now.timestamp())
    base = f"{obj.name}-{index}" if shape.per_replica else obj.name
    return f"{WORKLOAD_PREFIX[obj.kind]}-{base}-{suffix}"[:253]


@contextmanager
def _on_cluster(cluster: Cluster, dry_run: bool = False) -> Iterator[client.ApiClient | None]:
    """The Kubernetes API of a real cluster; None for a simulated one or a dry run (nothing
    to call)."""
    if dry_run or cluster.provider == Cluster.Provider.SIM:
        yield None
        return
    with kube_client.api_client(cluster) as api:
        yield api


def get_object(cluster: Cluster, kind: str, namespace: str, name: str) -> KubeObject:
    obj = KubeObject.objects.filter(
        cluster=cluster, kind=kind, namespace=namespace or "", name=name
    ).first()
    if obj is None:
        key = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
        raise ObjectNotFound(f"{key} not found in cluster {cluster.name}")
    return obj


def _as_document(obj: KubeObject, body: dict[str, Any]) -> Document:
    return Document(
        source="scale",
        index=1,
        api_version=obj.api_version,
        kind=obj.kind,
        name=obj.name,
        namespace=obj.namespace or None,
        body=body,
    )


def scale(
    obj: KubeObject, replicas: int, now: datetime, *, admit: Admit = Admit.AS_CONFIGURED
) -> None:
    """`kubectl scale` for Deployments and LeaderWorkerSets."""
    _refuse_foreign(obj)
    body = manifests.scale(_as_document(obj, obj.manifest), replicas)
    with _change(obj.cluster, admit), live.pod_changes(obj.cluster, now):
        live.touch([obj.pk])  # pods removed by a scale-down: reported as they go
        _scale_to(obj, replicas, now, body, _Lookups(obj.cluster, []))
        with _on_cluster(obj.cluster) as api:
            if api is not None:
                kube_apply.scale(api, obj.kind, obj.namespace, obj.name, replicas)
    _admit(obj.cluster, now, admit)


def _scale_to(
    obj: KubeObject, replicas: int, now: datetime, body: dict[str, Any], lookups: _Lookups
) -> None:
    shape = manifests.workload_shape(_as_document(obj, body))
    assert shape is not None
    # A replica is a workload (queued) or a group of pods sharing a replica index (unqueued).
    replicas_now: dict[int, list[Pod]] = defaultdict(list)
    for pod in obj.pods.filter(
        phase__in=(Pod.Phase.SCHEDULING_GATED, Pod.Phase.PENDING, Pod.Phase.RUNNING)
    ):
        replicas_now[pod.replica_index].append(pod)
    current = {w.replica_index: w for w in _active_workloads(obj)}
    indexes = set(current) if shape.queue_name else set(replicas_now)
    before = len(indexes)
    obj.manifest = body
    obj.updated_at = now
    obj.save(update_fields=["manifest", "updated_at"])
    if replicas > before:
        start = max(indexes, default=-1) + 1
        # Pods left from replicas that ended at these indexes: replaced, as a StatefulSet
        # replaces an ordinal's pod (a new pod's name comes from its index: pods.pod_names).
        obj.pods.filter(replica_index__gte=start).delete()
        new = range(start, start + replicas - before)
        _create_workloads(obj, shape, new, now, lookups, _as_document(obj, body))
    elif replicas < before:
        # A group Kueue has not admitted yet has no pods.
        groups = {index: replicas_now.get(index, []) for index in indexes}
        going = pods.replicas_to_remove(obj, groups, before - replicas)
        _remove([current[index] for index in going if index in current], now)
        unqueued = [p.pk for index in going if index not in current for p in replicas_now[index]]
        if unqueued:
            Pod.objects.filter(pk__in=unqueued).delete()
        runtime.unpark(obj.cluster, now)
    object_event(
        "workload.scaled",
        obj,
        now,
        replicas=replicas,
        previous=before,
        message=f"{obj.key} scaled from {before} to {replicas} replicas",
    )


def _remove(rows: Sequence[Workload], now: datetime) -> None:
    """The workloads go, their slices released, with an event each: the same few statements
    whatever their number (their cluster loaded, as `workload_event_row` reads it)."""
    if not rows:
        return
    slicing.release(rows, now)
    record_events(
        [
            workload_event_row("workload.deleted", row, now, f"workload {row.name} deleted")
            for row in rows
        ]
    )
    # Their pods, slices and links go with them (CASCADE), collected for all at once.
    Workload.objects.filter(pk__in=[row.pk for row in rows]).delete()


def _active_workloads(obj: KubeObject) -> QuerySet[Workload]:
    # Through the object's manager, each row knows the object as its owner without a query.
    return obj.workloads.filter(phase__in=Workload.ACTIVE_PHASES).select_related("cluster")


def _remove_workloads(obj: KubeObject, now: datetime) -> None:
    _remove(list(_active_workloads(obj)), now)
    obj.pods.all().delete()
    runtime.unpark(obj.cluster, now)


def delete(obj: KubeObject, now: datetime, *, admit: Admit = Admit.AS_CONFIGURED) -> None:
    _refuse_foreign(obj)
    cluster = obj.cluster
    # Its events go in last: recorded first, they held the event log's lock while the
    # deletion waited for the workloads' rows (a worker admitting them: a deadlock) and for
    # the cluster's API server.
    with _change(cluster, admit):
        held = live.released(obj)
        _remove_workloads(obj, now)
        object_event("object.deleted", obj, now, message=f"{obj.key} deleted", **held)
        obj.delete()
        with _on_cluster(cluster) as api:
            if api is not None:
                ref = ObjectRef.of(obj.api_version, obj.kind, obj.namespace, obj.name)
                kube_apply.delete(api, ref)
    _admit(cluster, now, admit)


def end(
    obj: KubeObject, now: datetime, *, failed: bool, admit: Admit = Admit.AS_CONFIGURED
) -> None:
    """The object's workloads finish (or fail) now, whatever their progress."""
    phase = Workload.Phase.FAILED if failed else Workload.Phase.FINISHED
    with _change(obj.cluster, admit):
        rows = list(
            obj.workloads.filter(phase__in=Workload.ACTIVE_PHASES).select_related(
                "owner", "cluster"
            )
        )
        runtime.finish(rows, now, phase)
    _admit(obj.cluster, now, admit)


class InUse(ValueError):
    """A deletion refused because other objects still depend on the object."""


def delete_queue_object(
    cluster: Cluster,
    kind: str,
    name: str,
    namespace: str | None,
    now: datetime,
    *,
    actor: User | None = None,
    admit: Admit = Admit.AS_CONFIGURED,
) -> None:
    """Delete a Kueue object, unless something still needs it (Kueue's finalizers, in effect).
    Admission then runs at `now` as `admit` says."""
    with _change(cluster, admit):
        row = _locked_queue_object(cluster, kind, name, namespace)
        refuse_unadopted(row)
        problem = _still_needed(cluster, row)
        if problem:
            raise InUse(f"{row.key} {problem}")
        row.delete()
        with _on_cluster(cluster) as api:
            if api is not None:
                api_version = row.manifest.get("apiVersion") or _API_VERSIONS.get(kind, KUEUE)
                namespace_of = row.namespace if row.NAMESPACED else ""
                kube_apply.delete(api, ObjectRef.of(api_version, kind, namespace_of, name))
        _record_queue_change(
            cluster, kind, namespace, row.key, "deleted", now, actor, before=rendered(row)
        )
        runtime.unpark(cluster, now)
    _admit(cluster, now, admit)


def _still_needed(cluster: Cluster, row: Any) -> str | None:
    active = Workload.objects.filter(cluster=cluster, phase__in=Workload.ACTIVE_PHASES)
    if row.KIND == "ClusterQueue":
        holding = active.filter(cluster_queue_name=row.name, phase__in=Workload.HOLDING_QUOTA)
        return f"still holds quota for {holding.count()} workloads" if holding.exists() else None
    # No LocalQueue rule: Kueue puts no finalizer on LocalQueues. Its admitted workloads keep
    # their quota; its pending ones wait, Misconfigured, until it is applied again.
    if row.KIND in ("ResourceFlavor", "AdmissionCheck"):
        users = [
            cq.name
            for cq in QUEUE_MODELS["ClusterQueue"]._default_manager.filter(cluster=cluster)
            if row.name in _references(manifests.ClusterQueueSpec.from_stored(cq.spec), row.KIND)
        ]
        return f"is used by ClusterQueue {', '.join(users)}" if users else None
    if row.KIND == "Topology":
        users = [
            f.name
            for f in QUEUE_MODELS["ResourceFlavor"]._default_manager.filter(cluster=cluster)
            if f.spec.get("topology_name") == row.name
        ]
        return f"is used by ResourceFlavor {', '.join(users)}" if users else None
    return None


def _references(spec: manifests.ClusterQueueSpec, kind: str) -> set[str]:
    """The ResourceFlavors or AdmissionChecks a ClusterQueue names."""
    return spec.flavor_names if kind == "ResourceFlavor" else set(spec.check_names)
