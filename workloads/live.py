"""Live events the pages refresh from: pods, nodes and training progress, coalesced.

A round of the simulator (or a tick over a real cluster's mirrored rows) may move thousands of
pods; an event per pod would flood the stream and every browser refetching on each. Instead
(docs/api.md, "Event types"):

- `workload.pods`: one per workload owner whose pod counts (pods, bound, running, ready,
  GPUs and TPU chips held by bound pods) differ from its previous `workload.pods`, per round,
  with the change in accelerators held since then (`gpus_change`, `tpus_change`; an owner's
  deletion, `object.deleted`, carries them too). At most
  `ACCELPLANE_LIVE_OWNER_EVENTS` owners per round are named; past that, one event per
  namespace sums the rest (no object: pages refresh their whole workload table).
- `workload.progress`: per running training workload, at most one per
  `ACCELPLANE_PROGRESS_EVENT_SECONDS` of the cluster's clock (virtual in the simulator),
  plus one in each round that saved a checkpoint, and one when training starts.
- `node.changed` (clusters.live): one per cluster per round when its nodes changed.

What was last reported is read back from the event log, so nothing else is stored and a
second worker reporting the same change finds it reported.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection as db_connection
from django.db import transaction
from django.db.models import QuerySet
from django.db.models.fields.json import KeyTextTransform, KeyTransform

from clusters import live as cluster_live
from clusters.catalog import GPU_RESOURCE, TPU_RESOURCE
from clusters.models import Cluster
from controlplane import bulk
from controlplane.prepared import Keys, Param, Prepared
from events.models import Event
from events.services import new_event, record_events
from workloads import checkpoints
from workloads.history import workload_event_row
from workloads.kube import connection
from workloads.models import KubeObject, Pod, Workload
from workloads.status import WORKLOAD_KINDS

PODS = "workload.pods"
PROGRESS = "workload.progress"
COUNTS = ("pods", "bound", "running", "ready", "gpus", "tpus")
# Accelerators held by the bound pods (whole units): each event also says by how much they
# changed since the owner's previous one (`gpus_change`), so the usage chart (web/panels.py
# usage_history) adds up one query's events without looking further back.
HELD = {"gpus": GPU_RESOURCE, "tpus": TPU_RESOURCE}
CHANGES = tuple(f"{name}_change" for name in HELD)
# An owner without pods.
NO_PODS = {**dict.fromkeys(COUNTS, 0), "workload": ""}
HOLDING_NODE = (Pod.Phase.PENDING, Pod.Phase.RUNNING)
# Keys per `object_key__in` query: below SQLite's smallest bound on query variables (999).
CHUNK = 500

_touched = threading.local()


@contextmanager
def pod_changes(cluster: Cluster, now: datetime) -> Iterator[None]:
    """Owners whose pods change inside (`touch`) get their `workload.pods` on the way out."""
    if getattr(_touched, "owners", None) is not None:
        yield  # an outer block reports them
        return
    _touched.owners = set()
    try:
        yield
        owners = _touched.owners
    finally:
        _touched.owners = None
    if owners:
        report_pods(cluster, now, owners)


def touch(owner_ids: Iterable[int]) -> None:
    """Pods of these owners changed; reported when the enclosing `pod_changes` ends (outside
    one, the caller's own events tell the story: a deletion, a finished job)."""
    owners = getattr(_touched, "owners", None)
    if owners is not None:
        owners.update(owner_ids)


def _held(resource: str) -> KeyTextTransform:
    """A pod's request of `resource` (milli-units), read from its owner's row."""
    return KeyTextTransform(resource, KeyTransform("requests", "pods__scheduling"))


def _owner_rows(owners: QuerySet[KubeObject]) -> QuerySet[KubeObject]:
    return owners.order_by().values_list(
        "pk",
        "cluster_id",
        "kind",
        "namespace",
        "name",
        "pods__phase",
        "pods__node_id",
        "pods__ready",
        "pods__workload_id",
        "pods__workload__name",
        *(_held(resource) for resource in HELD.values()),
    )


# Built once (controlplane/prepared.py): every round of the simulated cluster reads its
# changed owners.
_ALL_OWNERS = Prepared(
    lambda: _owner_rows(
        KubeObject.objects.filter(cluster_id=Param("cluster"), kind__in=WORKLOAD_KINDS)
    )
)
# By primary key alone, their pods by the owner index; the cluster and kind are checked by
# `_owners`: with them in the query, SQLite would walk all of the cluster's owners of these
# kinds by the (cluster, kind, namespace, name) index.
_OWNERS = Prepared(lambda: _owner_rows(KubeObject.objects.filter(pk__in=Keys("owners"))))


def _owners(
    cluster: Cluster, owner_ids: Iterable[int] | None
) -> dict[int, tuple[str, str, dict[str, Any]]]:
    """The owners (all of the cluster's: None): key, namespace and pod counts, i.e. its
    pods, those bound to a node, running (ready on a node, as the pages count them) and ready,
    the GPUs and TPU chips its bound pods request; `workload` names its Kueue workload when its
    pods have one only. One row per pod, added up here: for a round's few owners, building
    the database's aggregates cost more than running them."""
    if owner_ids is None:
        rows = _ALL_OWNERS.rows(cluster=cluster.pk)
    else:
        rows = _OWNERS.rows(owners=set(owner_ids))
    found: dict[int, tuple[str, str, dict[str, Any]]] = {}
    workloads: dict[int, dict[int, str]] = defaultdict(dict)
    for pk, cluster_id, kind, ns, name, phase, node, ready, workload, workload_name, *held in rows:
        if cluster_id != cluster.pk or kind not in WORKLOAD_KINDS:
            continue
        if pk not in found:
            found[pk] = (f"{kind}/{ns}/{name}", ns, dict(NO_PODS))
        if phase is None:
            continue  # no pods (a pod always has a phase)
        _count(found[pk][2], phase, node, ready, held)
        if workload is not None:
            workloads[pk][workload] = workload_name
    for pk, (_, _, owner) in found.items():
        for count in HELD:
            owner[count] //= 1000
        if len(workloads[pk]) == 1:
            (owner["workload"],) = workloads[pk].values()
    return found


def _count(
    counts: dict[str, Any], phase: str, node: int | None, ready: bool, held: list[Any]
) -> None:
    """Adds a pod to its owner's counts (`held`: its requests of HELD's resources)."""
    counts["pods"] += 1
    counts["ready"] += ready
    if node is not None and phase in HOLDING_NODE:
        counts["bound"] += 1
        counts["running"] += phase == Pod.Phase.RUNNING and ready
        for count, amount in zip(HELD, held, strict=True):
            counts[count] += int(amount or 0)


def _last_reported(cluster: Cluster, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The data of each object's latest `workload.pods`: its newest event alone, read backwards
    by `event_object_idx` (a long-lived Deployment has one per change of its pods)."""
    events = db_connection.ops.quote_name(Event._meta.db_table)
    latest = (
        f"SELECT e.data FROM {events} e WHERE e.cluster = %s AND e.kind = %s"
        " AND e.object_key = k.value ORDER BY e.id DESC LIMIT 1"
    )
    # The keys as one parameter: SQLite caps a statement's parameters.
    each_key, keys_param = bulk.key_table(keys, "text")
    with db_connection.cursor() as cursor:
        cursor.execute(
            f"SELECT k.value, ({latest}) FROM {each_key}", [cluster.name, PODS, keys_param]
        )
        rows = cursor.fetchall()
    # JSON comes back as text from both databases (Django loads PostgreSQL's jsonb as text).
    return {key: json.loads(text) for key, text in rows if text is not None}


def report_pods(cluster: Cluster, now: datetime, owner_ids: Iterable[int] | None = None) -> None:
    """`workload.pods` for the owners (all of the cluster's: None) whose counts changed."""
    found = _owners(cluster, owner_ids)
    if not found:
        return
    reported = _last_reported(cluster, sorted(key for key, _, _ in found.values()))
    changed = []
    for key, namespace, now_counts in found.values():
        before = reported.get(key)
        if before is None and not now_counts["pods"]:
            continue  # never had pods: nothing to say
        if before is None or any(before.get(c) != now_counts[c] for c in COUNTS):
            held_before = before or {}
            change = {f"{n}_change": now_counts[n] - held_before.get(n, 0) for n in HELD}
            changed.append((key, namespace, {**now_counts, **change}))
    changed.sort()
    limit = settings.ACCELPLANE_LIVE_OWNER_EVENTS
    events = [_owner_event(cluster, now, key, ns, c) for key, ns, c in changed[:limit]]
    rest: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, namespace, c in changed[limit:]:
        rest[namespace].append(c)
    events += [_namespace_event(cluster, now, ns, rows) for ns, rows in sorted(rest.items())]
    record_events(events)


def released(obj: KubeObject) -> dict[str, int]:
    """For the event of an owner deleted with its pods (no `workload.pods` follows: the owner
    is gone): the accelerators its last `workload.pods` said it held, as `gpus_change`..."""
    last = _last_reported(obj.cluster, [obj.key]).get(obj.key, {})
    return {f"{name}_change": -last[name] for name in HELD if last.get(name)}


def _message(c: dict[str, Any]) -> str:
    return (
        f"{c['running']} of {c['pods']} pod{'s' if c['pods'] != 1 else ''} running, "
        f"{c['ready']} ready, {c['bound']} bound to nodes"
    )


def _owner_event(
    cluster: Cluster, now: datetime, key: str, namespace: str, c: dict[str, Any]
) -> Event:
    counts = {name: c[name] for name in (*COUNTS, *CHANGES)}
    return new_event(
        PODS,
        at=now,
        message=_message(c),
        cluster=cluster.name,
        namespace=namespace,
        object_key=key,
        workload=c["workload"],
        **counts,
    )


def _namespace_event(
    cluster: Cluster, now: datetime, namespace: str, rows: list[dict[str, Any]]
) -> Event:
    """The owners past the per-round limit in one namespace, summed (and not named)."""
    total = {name: sum(r[name] for r in rows) for name in (*COUNTS, *CHANGES)}
    return new_event(
        PODS,
        at=now,
        message=f"pods of {len(rows)} workloads changed: {_message(total)}",
        cluster=cluster.name,
        namespace=namespace,
        workloads=len(rows),
        **total,
    )


def report_progress(
    cluster: Cluster,
    rows: Sequence[Workload],
    steps: dict[int, int],
    saved: set[int],
    now: datetime,
) -> None:
    """`workload.progress` of running training workloads (`steps`: row pk -> current step):
    those that saved a checkpoint this round (`saved`, row pks) and those not reported within
    the last ACCELPLANE_PROGRESS_EVENT_SECONDS."""
    if not rows:
        return
    since = now - timedelta(seconds=settings.ACCELPLANE_PROGRESS_EVENT_SECONDS)
    # Only these rows' owners' events (`event_object_idx`; a row's progress events name its
    # owner): every job that ever trained on the cluster has progress events of this kind.
    keys = sorted({row.owner.key for row in rows})
    recent: set[tuple[str, str]] = set()
    for start in range(0, len(keys), CHUNK):
        recent.update(
            Event.objects.filter(
                cluster=cluster.name,
                kind=PROGRESS,
                object_key__in=keys[start : start + CHUNK],
                at__gt=since,
            )
            .order_by()
            .values_list("namespace", "workload_name")
        )
    due = [r for r in rows if r.pk in saved or (r.namespace, r.name) not in recent]
    if not due:
        return
    latest = checkpoints.latest_steps(r.owner_id for r in due)
    events = []
    for row in due:
        step, checkpoint = steps[row.pk], latest.get(row.owner_id, 0)
        total = row.owner.simulation.get("total_steps") or None
        of = f" of {total}" if total else ""
        events.append(
            workload_event_row(
                PROGRESS,
                row,
                now,
                f"training at step {step}{of}; latest checkpoint step {checkpoint}",
                step=step,
                total_steps=total,
                checkpoint_step=checkpoint,
            )
        )
    record_events(events)


def report_mirrored(now: datetime) -> None:
    """Live mode (Celery beat): the pods and nodes of real clusters, which their watches mirror
    change by change without events, reported at most once per tick."""
    for cluster in Cluster.objects.filter(
        status=Cluster.Status.RUNNING, provider=Cluster.Provider.GKE
    ):
        with transaction.atomic():
            report_pods(cluster, now)
            cluster_live.report_nodes(cluster, now)
            connection.report(cluster, now)
