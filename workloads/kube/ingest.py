"""Kueue Workload objects seen on a real cluster -> our Workload rows and the simulator's events.

On a real cluster Kueue decides; this replays its decisions as the transitions the simulator
makes (workloads/admission.py, runtime.py), with the same event kinds and data:
quota_reserved, admitted (+ resumed), preempted, evicted, requeued, finished/failed.
Each transition fires only when the row is not there yet, so an object seen twice (a
relist, a resumed watch) emits nothing new.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F

from clusters.models import Cluster
from events.models import Event
from events.services import record_events
from workloads.checkpoints import latest_step
from workloads.history import admitted_events, preempted_event_row, workload_event_row
from workloads.models import KubeObject, KueueWorkloadLink, Workload

# Kueue names the preemptor by UID: "Preempted to accommodate a workload (UID: u, JobUID: j)".
PREEMPTOR_UID = re.compile(r"\(UID: ([^,)\s]+)")


@dataclass(frozen=True, slots=True)
class Condition:
    status: bool
    reason: str
    message: str
    at: datetime


@dataclass(frozen=True, slots=True)
class Observed:
    """What one Kueue Workload object says, in the terms our transitions need."""

    uid: str
    namespace: str
    name: str
    owner: tuple[str, str]
    """The controlling owner's kind and name (Job, JobSet, LeaderWorkerSet, Pod)."""
    conditions: dict[str, Condition]
    admission: dict[str, Any] | None
    seen_at: datetime

    def true(self, kind: str) -> Condition | None:
        condition = self.conditions.get(kind)
        return condition if condition is not None and condition.status else None

    def changed_at(self, kind: str) -> datetime:
        condition = self.conditions.get(kind)
        return condition.at if condition is not None else self.seen_at


def observe(obj: Mapping[str, Any], now: datetime) -> Observed:
    metadata = obj.get("metadata") or {}
    status = obj.get("status") or {}
    owners = metadata.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    return Observed(
        uid=metadata.get("uid", ""),
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        owner=(owner.get("kind", ""), owner.get("name", "")),
        conditions={
            c["type"]: Condition(
                c.get("status") == "True",
                c.get("reason", ""),
                c.get("message", ""),
                kube_time(c.get("lastTransitionTime"), now),
            )
            for c in status.get("conditions") or []
        },
        admission=_admission(status.get("admission")),
        seen_at=now,
    )


def ingest(cluster: Cluster, obj: Mapping[str, Any], now: datetime) -> list[Event]:
    """Bring the Workload row in line with the object; the events of the transitions made."""
    seen = observe(obj, now)
    with transaction.atomic():
        row = _bound_row(cluster, seen)
        if row is None:
            return []  # Not submitted through Accelplane.
        events = [
            *_evict(row, seen),
            *_release(row, seen),
            *_reserve(row, seen),
            *_admit(row, seen),
            *_finish(row, seen),
        ]
        # Saved even without events: an eviction for another reason than preemption is
        # silent until its quota is released.
        row.save()
        record_events(events)
    return events


def forget(cluster: Cluster, uids: Iterable[str]) -> None:
    """Kueue deleted these Workload objects: their rows may be bound again (a Deployment's
    replacement pod gets a new Kueue Workload for the same replica)."""
    KueueWorkloadLink.objects.filter(cluster=cluster, uid__in=list(uids)).delete()


def forget_all_but(cluster: Cluster, uids: Iterable[str]) -> None:
    """After a relist: objects deleted while nobody watched are forgotten too."""
    KueueWorkloadLink.objects.filter(cluster=cluster).exclude(uid__in=list(uids)).delete()


def _bound_row(cluster: Cluster, seen: Observed) -> Workload | None:
    """The row this object stands for; the first sighting binds it by name or by owner."""
    link = KueueWorkloadLink.objects.filter(cluster=cluster, uid=seen.uid).first()
    if link is None:
        row = _unbound_row(cluster, seen)
        if row is None:
            return None
        # get_or_create: another worker may bind the same object at the same moment.
        link, _ = KueueWorkloadLink.objects.get_or_create(
            cluster=cluster,
            uid=seen.uid,
            defaults={"namespace": seen.namespace, "name": seen.name, "workload": row},
        )
    # Locked: two workers ingesting the same object never both make a transition.
    return (
        Workload.objects.select_for_update()
        .select_related("owner", "cluster")
        .get(pk=link.workload_id)
    )


def _unbound_row(cluster: Cluster, seen: Observed) -> Workload | None:
    rows = Workload.objects.filter(cluster=cluster, namespace=seen.namespace)
    named = rows.filter(name=seen.name).first()
    if named is not None:
        return named
    kind, name = seen.owner
    if kind == "Pod":
        # Kueue's pod integration: a Deployment's pod is <deployment>-<replicaset hash>-<suffix>.
        kind, name = "Deployment", name.rsplit("-", 2)[0]
    return (
        rows.filter(
            owner__kind=kind,
            owner__name=name,
            phase__in=Workload.ACTIVE_PHASES,
            kueue_links__isnull=True,
        )
        .order_by("replica_index", "queued_at")
        .first()
    )


def _evict(row: Workload, seen: Observed) -> list[Event]:
    evicted = seen.true("Evicted")
    if (
        evicted is None
        or row.evicting
        or row.phase not in Workload.HOLDING_QUOTA
        # An Evicted condition older than this admission is about an earlier one.
        or (row.quota_reserved_at is not None and evicted.at < row.quota_reserved_at)
    ):
        return []
    row.evicting = True
    row.eviction_reason = evicted.reason
    if evicted.reason != "Preempted":
        return []
    preempted = seen.true("Preempted")
    row.preemption_reason = preempted.reason if preempted else ""
    row.preemptions += 1
    KubeObject.objects.filter(pk=row.owner_id).update(preemptions=F("preemptions") + 1)
    preemptor = _preemptor(row.cluster, evicted.message)
    return [preempted_event_row(row, evicted.at, row.preemption_reason, preemptor)]


def _preemptor(cluster: Cluster, message: str) -> Workload | None:
    match = PREEMPTOR_UID.search(message)
    if match is None:
        return None
    link = (
        KueueWorkloadLink.objects.filter(cluster=cluster, uid=match[1])
        .select_related("workload__owner")
        .first()
    )
    return link.workload if link else None


def _release(row: Workload, seen: Observed) -> list[Event]:
    """Quota released after an eviction (or a reservation Kueue withdrew): back to the queue."""
    if seen.true("QuotaReserved") or seen.true("Finished"):
        return []
    if row.phase not in Workload.HOLDING_QUOTA:
        return []
    at = seen.changed_at("QuotaReserved")
    reason = row.eviction_reason or "QuotaReleased"
    row.phase = Workload.Phase.PENDING
    row.admission = None
    row.evicting = False
    row.quota_reserved_at = row.admitted_at = None
    events = [
        workload_event_row(
            "workload.evicted", row, at, f"evicted ({reason}), quota released", reason=reason
        )
    ]
    if seen.true("Requeued"):
        events.append(
            workload_event_row(
                "workload.requeued", row, at, f"requeued in LocalQueue {row.queue_name}"
            )
        )
    return events


def _reserve(row: Workload, seen: Observed) -> list[Event]:
    reserved = seen.true("QuotaReserved")
    if reserved is None or seen.admission is None or row.phase != Workload.Phase.PENDING:
        return []
    cq = seen.admission["cluster_queue"]
    row.phase = Workload.Phase.QUOTA_RESERVED
    row.admission = seen.admission
    row.cluster_queue_name = cq
    row.quota_reserved_at = reserved.at
    row.parked = row.preempting = row.evicting = False
    row.pending_reason = row.pending_message = row.eviction_reason = ""
    row.admissions += 1
    step = latest_step(row)
    row.start_step = step
    row.resumed_from_step = step if step and row.admissions > 1 else None
    flavor = _flavor_text(seen.admission)
    return [
        workload_event_row(
            "workload.quota_reserved",
            row,
            reserved.at,
            f"quota reserved in ClusterQueue {cq} with flavor {flavor}",
            cluster_queue=cq,
            flavor=flavor,
        )
    ]


def _admit(row: Workload, seen: Observed) -> list[Event]:
    admitted = seen.true("Admitted")
    if admitted is None or row.phase != Workload.Phase.QUOTA_RESERVED:
        return []
    flavor = _flavor_text(row.admission or {})
    message = f"admitted by ClusterQueue {row.cluster_queue_name} with flavor {flavor}"
    return admitted_events(row, admitted.at, message)


def _finish(row: Workload, seen: Observed) -> list[Event]:
    finished = seen.true("Finished")
    if finished is None or row.phase in (Workload.Phase.FINISHED, Workload.Phase.FAILED):
        return []
    failed = finished.reason == "Failed"
    row.phase = Workload.Phase.FAILED if failed else Workload.Phase.FINISHED
    row.finished_at = finished.at
    row.evicting = False
    kind = "workload.failed" if failed else "workload.finished"
    return [workload_event_row(kind, row, finished.at, f"{row.owner.key} {row.phase.lower()}")]


def _admission(status: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """status.admission in our admission JSON (snapshot.admission_json's shape)."""
    if not status:
        return None
    return {
        "cluster_queue": status.get("clusterQueue", ""),
        "pod_sets": [
            {"name": p.get("name", "main"), "flavors": p.get("flavors") or {}, "count": p["count"]}
            for p in status.get("podSetAssignments") or []
        ],
    }


def _flavor_text(admission: Mapping[str, Any]) -> str:
    flavors = sorted({f for p in admission.get("pod_sets", []) for f in p["flavors"].values()})
    return ", ".join(flavors) or "no flavor"


def kube_time(text: str | None, now: datetime) -> datetime:
    """A Kubernetes timestamp; `now` when the object has none."""
    return datetime.fromisoformat(text) if text else now
