"""Kueue Workload objects seen on a real cluster -> our Workload rows and the simulator's events.

On a real cluster Kueue decides; this replays its decisions as the transitions the simulator
makes (workloads/admission.py, runtime.py), with the same event kinds and data:
quota_reserved, admitted (+ resumed), preempted, evicted, requeued, finished/failed.
Each transition fires only when the row is not there yet, so an object seen twice (a
relist, a resumed watch) emits nothing new.

A Kueue Workload Accelplane did not submit (kubectl, Helm, another controller) gets a row
too, under an opaque owner (KubeObject.managed_elsewhere: kind, namespace and name only), so
that every allocation view, explain and what-if count what it holds. Its PodSets are read from
the Workload's spec with the normaliser an apply uses; one that fails to parse is recorded
on the watch's row (KubeWatch.unreadable) and left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F

from clusters.models import Cluster
from events.models import Event
from events.services import deferred_events, record_events
from workloads import runtime
from workloads.checkpoints import latest_step
from workloads.history import admitted_events, preempted_event_row, workload_event_row
from workloads.manifests import ManifestError
from workloads.manifests.fields import Fields, join
from workloads.manifests.podsets import pod_set
from workloads.models import KubeObject, KubeWatch, KueueWorkloadLink, Workload

RESOURCE = "workloads.kueue.x-k8s.io"
"""The KubeWatch row of Kueue Workloads."""
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
        row = _bound_row(cluster, seen, obj)
        if row is None:
            return []  # Unreadable, or an extra one of an object Accelplane submitted.
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
    replacement pod gets a new Kueue Workload for the same replica); the rows of those
    Accelplane did not submit go, and their owners once they have no workload left."""
    _forget(KueueWorkloadLink.objects.filter(cluster=cluster, uid__in=list(uids)))


def forget_all_but(cluster: Cluster, uids: Iterable[str]) -> None:
    """After a relist: objects deleted while nobody watched are forgotten too."""
    _forget(KueueWorkloadLink.objects.filter(cluster=cluster).exclude(uid__in=list(uids)))


def _forget(links: Any) -> None:
    foreign = Workload.objects.filter(
        pk__in=links.values("workload"), owner__managed_elsewhere=True
    )
    owners = list(foreign.values_list("owner", flat=True))
    with transaction.atomic():
        links.delete()
        foreign.delete()
        KubeObject.objects.filter(pk__in=owners, workloads__isnull=True).delete()


def _bound_row(cluster: Cluster, seen: Observed, obj: Mapping[str, Any]) -> Workload | None:
    """The row this object stands for; the first sighting binds it by name or by owner,
    or makes a row for a Workload Accelplane did not submit."""
    link = KueueWorkloadLink.objects.filter(cluster=cluster, uid=seen.uid).first()
    if link is None:
        row = _unbound_row(cluster, seen) or _foreign_row(cluster, seen, obj)
        if row is None:
            return None
        # get_or_create: another worker may bind the same object at the same moment.
        link, _ = KueueWorkloadLink.objects.get_or_create(
            cluster=cluster,
            uid=seen.uid,
            defaults={"namespace": seen.namespace, "name": seen.name, "workload": row},
        )
    # Locked: two workers ingesting the same object never both make a transition. Only the
    # row, and not against its pods' foreign keys: the Pods' watch holds the cluster's row
    # and inserts pods that point at this one, so locking the joined cluster (or a key lock)
    # here deadlocked the two watches.
    return (
        Workload.objects.select_for_update(no_key=True, of=("self",))
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


def _foreign_row(cluster: Cluster, seen: Observed, obj: Mapping[str, Any]) -> Workload | None:
    """A row for a Workload someone else submitted, pending until its status says otherwise
    (the transitions then replay what Kueue did, as for Accelplane's own)."""
    kind, name = seen.owner
    if not kind:
        kind, name = "Workload", seen.name  # a bare Workload object: its own owner
    if Workload.objects.filter(cluster=cluster, namespace=seen.namespace, name=seen.name).exists():
        return None  # the name of a row bound to another object
    spec = obj.get("spec") or {}
    metadata = obj.get("metadata") or {}
    try:
        pod_sets = _pod_sets(cluster, seen, spec)
    except ManifestError as error:
        note(cluster, RESOURCE, f"Workload/{seen.namespace}/{seen.name}", str(error))
        return None
    owner, _ = KubeObject.objects.get_or_create(
        cluster=cluster,
        kind=kind,
        namespace=seen.namespace,
        name=name,
        defaults={
            "api_version": _owner_api_version(obj, kind),
            "manifest": {},
            "managed_elsewhere": True,
            "created_at": seen.seen_at,
            "updated_at": seen.seen_at,
        },
    )
    if not owner.managed_elsewhere:
        return None  # an object Accelplane submitted: its rows are bound by owner only
    priority = spec.get("priority")
    try:
        return Workload.objects.create(
            cluster=cluster,
            owner=owner,
            name=seen.name,
            namespace=seen.namespace,
            queue_name=str(spec.get("queueName") or ""),
            priority=priority if isinstance(priority, int) else 0,
            priority_class_name=_priority_class_name(spec),
            pod_sets=pod_sets,
            queued_at=kube_time(metadata.get("creationTimestamp"), seen.seen_at),
            active=spec.get("active") is not False,
        )
    except IntegrityError:
        return None  # another worker made it first: the next sighting finds its link


def _pod_sets(cluster: Cluster, seen: Observed, spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """spec.podSets as Workload.pod_sets holds them (requests per pod, in milli-units)."""
    fields = Fields(f"cluster {cluster.name}", None, f"Workload/{seen.namespace}/{seen.name}")
    result = []
    for path, item in fields.mappings(spec, "podSets", "spec", min_items=1, max_items=8):
        template = fields.mapping(item, "template", path, required=True)
        parsed = pod_set(
            fields,
            template,
            join(path, "template"),
            name=fields.string(item, "name", path, default="main"),
            count=fields.integer(item, "count", path, default=1),
            min_count=fields.optional_integer(item, "minCount", path, minimum=1),
        )
        result.append(asdict(parsed))
    return result


def _priority_class_name(spec: Mapping[str, Any]) -> str:
    """v1beta2 names it in priorityClassRef, v1beta1 in priorityClassName
    (Kueue apis/kueue/v1beta1/workload_conversion.go)."""
    ref = spec.get("priorityClassRef")
    name = ref.get("name") if isinstance(ref, Mapping) else spec.get("priorityClassName")
    return str(name or "")


def _owner_api_version(obj: Mapping[str, Any], kind: str) -> str:
    """The owner's, else (a bare Workload) the Workload's own as served."""
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    found = next((o for o in owners if o.get("kind") == kind), None)
    return str(found.get("apiVersion", "")) if found else str(obj.get("apiVersion", ""))


def note(cluster: Cluster, resource: str, key: str, error: str | None) -> None:
    """Records an object that could not be read (or, `error` None, that now reads) on the
    row of the watch of `resource`, where the cluster's connection status shows it."""
    state, _ = KubeWatch.objects.get_or_create(cluster=cluster, resource=resource)
    if state.unreadable.get(key) == error:
        return
    unreadable = {k: v for k, v in state.unreadable.items() if k != key}
    if error is not None:
        unreadable[key] = error
    state.unreadable = unreadable
    state.save(update_fields=["unreadable"])


# Jobs: their completion, and the opaque owners that go with them.

JOB_ENDED = {"Complete": Workload.Phase.FINISHED, "Failed": Workload.Phase.FAILED}


def ingest_job(cluster: Cluster, obj: Mapping[str, Any], now: datetime) -> int:
    """A Job that completed or failed ends its workloads still active (Kueue marks its
    Workload Finished soon after: that transition then emits nothing)."""
    metadata = obj.get("metadata") or {}
    conditions = (obj.get("status") or {}).get("conditions") or []
    ended = next(
        (c for c in conditions if c.get("type") in JOB_ENDED and c.get("status") == "True"), None
    )
    if ended is None:
        return 0
    # Deferred: runtime.finish unparks the cluster's workloads (row locks) after its events.
    with transaction.atomic(), deferred_events():
        rows = list(
            Workload.objects.select_for_update(no_key=True, of=("self",))
            .filter(
                cluster=cluster,
                owner__kind="Job",
                owner__namespace=metadata.get("namespace", ""),
                owner__name=metadata.get("name", ""),
                phase__in=Workload.ACTIVE_PHASES,
            )
            .select_related("owner", "cluster")
        )
        at = kube_time(ended.get("lastTransitionTime"), now)
        runtime.finish(rows, at, JOB_ENDED[ended["type"]])
    return len(rows)


def forget_job(cluster: Cluster, obj: Mapping[str, Any]) -> None:
    """A Job deleted on the cluster: one Accelplane did not submit goes with its rows."""
    metadata = obj.get("metadata") or {}
    KubeObject.objects.filter(
        cluster=cluster,
        kind="Job",
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        managed_elsewhere=True,
    ).delete()


def keep_jobs(cluster: Cluster, items: Iterable[Mapping[str, Any]]) -> None:
    listed = {
        ((o.get("metadata") or {}).get("namespace", ""), (o.get("metadata") or {}).get("name", ""))
        for o in items
    }
    rows = KubeObject.objects.filter(cluster=cluster, kind="Job", managed_elsewhere=True)
    rows_now = rows.values_list("pk", "namespace", "name")
    gone = [pk for pk, namespace, name in rows_now if (namespace, name) not in listed]
    KubeObject.objects.filter(pk__in=gone).delete()


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
    row.parked_release = None
    row.preempting = row.evicting = False
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
