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

import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, IntegerField, Max, Q, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from clusters import live as cluster_live
from clusters.catalog import GPU_RESOURCE, TPU_RESOURCE
from clusters.models import Cluster
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


def _requested(resource: str, where: Q) -> Sum:
    """The pods' requests of `resource` (milli-units), summed in the database."""
    return Sum(Cast(KT(f"scheduling__requests__{resource}"), IntegerField()), filter=where)


def pod_counts(
    cluster: Cluster, owner_ids: Iterable[int] | None = None
) -> dict[int, dict[str, Any]]:
    """Per owner: its pods, those bound to a node, running (ready on a node, as the pages
    count them) and ready, the GPUs and TPU chips its bound pods request; `workload` names
    its Kueue workload when its pods have one only."""
    if owner_ids is None:
        rows = Pod.objects.filter(cluster=cluster)
    else:
        # The owners' pods alone, by the owner index. The owners are the cluster's, and so
        # are their pods: filtering by cluster too would lead SQLite to walk every pod the
        # cluster ever had, finished jobs' included.
        rows = Pod.objects.filter(owner_id__in=list(owner_ids))
    on_node = Q(node__isnull=False, phase__in=HOLDING_NODE)
    counted = (
        rows.order_by()
        .values("owner_id")
        .annotate(
            pods=Count("pk"),
            bound=Count("pk", filter=on_node),
            running=Count("pk", filter=on_node & Q(phase=Pod.Phase.RUNNING, ready=True)),
            ready=Count("pk", filter=Q(ready=True)),
            workloads=Count("workload", distinct=True),
            workload=Max("workload__name"),
            gpus=_requested(GPU_RESOURCE, on_node),
            tpus=_requested(TPU_RESOURCE, on_node),
        )
    )
    return {
        row["owner_id"]: {
            "pods": row["pods"],
            "bound": row["bound"],
            "running": row["running"],
            "ready": row["ready"],
            "gpus": (row["gpus"] or 0) // 1000,
            "tpus": (row["tpus"] or 0) // 1000,
            "workload": row["workload"] if row["workloads"] == 1 else "",
        }
        for row in counted
    }


def _last_reported(cluster: Cluster, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The data of each object's latest `workload.pods`."""
    latest: list[int] = []
    for start in range(0, len(keys), CHUNK):
        found = (
            Event.objects.filter(
                cluster=cluster.name, kind=PODS, object_key__in=keys[start : start + CHUNK]
            )
            .order_by()
            .values("object_key")
            .annotate(last=Max("id"))
            .values_list("last", flat=True)
        )
        latest += found
    return dict(Event.objects.filter(id__in=latest).values_list("object_key", "data"))


def report_pods(cluster: Cluster, now: datetime, owner_ids: Iterable[int] | None = None) -> None:
    """`workload.pods` for the owners (all of the cluster's: None) whose counts changed."""
    owners = KubeObject.objects.filter(cluster=cluster, kind__in=WORKLOAD_KINDS)
    if owner_ids is not None:
        owners = owners.filter(pk__in=list(owner_ids))
    found = {
        pk: (kind, ns, name)
        for pk, kind, ns, name in owners.values_list("pk", "kind", "namespace", "name")
    }
    if not found:
        return
    counts = pod_counts(cluster, found if owner_ids is not None else None)
    keys = {pk: f"{kind}/{ns}/{name}" for pk, (kind, ns, name) in found.items()}
    reported = _last_reported(cluster, sorted(keys.values()))
    none = {**dict.fromkeys(COUNTS, 0), "workload": ""}
    changed = []
    for pk, key in keys.items():
        now_counts = counts.get(pk, none)
        before = reported.get(key)
        if before is None and not now_counts["pods"]:
            continue  # never had pods: nothing to say
        if before is None or any(before.get(c) != now_counts[c] for c in COUNTS):
            held_before = before or {}
            change = {f"{n}_change": now_counts[n] - held_before.get(n, 0) for n in HELD}
            changed.append((key, found[pk][1], {**now_counts, **change}))
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
