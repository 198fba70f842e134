"""The one admission service: snapshot -> scheduler -> decisions and events, in one transaction."""

from __future__ import annotations

import zlib
from datetime import datetime

from django.db import connection, transaction
from django.db.models import F

import scheduler
from clusters.models import Cluster
from workloads import pods
from workloads.history import workload_event
from workloads.models import Checkpoint, ClusterQueue, KubeObject, Workload
from workloads.snapshot import ClusterSnapshot, admission_json, load


def lock_admission(cluster: Cluster) -> None:
    """Serialise admission per cluster, so two workers never admit against the same quota."""
    if connection.vendor == "postgresql":
        key = zlib.crc32(f"admission:{cluster.pk}".encode())
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
    # SQLite: transactions begin IMMEDIATE (settings), so writers are already serialised.


def admit_pending(cluster: Cluster, now: datetime) -> scheduler.Decisions:
    """Run Kueue's scheduling cycles over the cluster and persist every decision."""
    with transaction.atomic():
        lock_admission(cluster)
        snap = load(cluster)
        decisions = scheduler.schedule(snap.snapshot)
        checks = _admission_checks(cluster)
        for admit in decisions.admitted:
            _admit(cluster, snap, admit, checks.get(admit.admission.cluster_queue, ()), now)
        for preempt in decisions.preemptions:
            _preempt(cluster, snap, preempt, now)
        for pending in decisions.pending:
            _mark_pending(snap.rows[pending.workload], pending)
    return decisions


def _admission_checks(cluster: Cluster) -> dict[str, tuple[str, ...]]:
    return {
        row.name: tuple(c["name"] for c in row.spec.get("admission_checks") or ())
        for row in ClusterQueue.objects.filter(cluster=cluster)
    }


def _flavor_text(admission: scheduler.Admission) -> str:
    flavors = sorted({f for p in admission.pod_sets for f in p.flavors.values()})
    return ", ".join(flavors) or "no flavor"


def _admit(
    cluster: Cluster,
    snap: ClusterSnapshot,
    admit: scheduler.Admit,
    checks: tuple[str, ...],
    now: datetime,
) -> None:
    row = snap.rows[admit.workload]
    owner = row.owner
    cq = admit.admission.cluster_queue
    row.admission = admission_json(admit.admission)
    row.cluster_queue_name = cq
    row.quota_reserved_at = now
    row.parked = row.preempting = False
    row.pending_reason = row.pending_message = ""
    row.admissions += 1
    flavor = _flavor_text(admit.admission)
    workload_event(
        "workload.quota_reserved",
        row,
        now,
        cluster_queue=cq,
        flavor=flavor,
        borrowing=admit.borrowing,
        message=f"quota reserved in ClusterQueue {cq} with flavor {flavor}",
    )
    latest = Checkpoint.objects.filter(owner=owner).order_by("-step").first()
    row.start_step = latest.step if latest else 0
    row.resumed_from_step = latest.step if latest and row.admissions > 1 else None
    if checks:
        row.phase = Workload.Phase.QUOTA_RESERVED
        row.save()
        return
    mark_admitted(row, now, f"admitted by ClusterQueue {cq} with flavor {flavor}")


def mark_admitted(row: Workload, now: datetime, message: str) -> None:
    """QuotaReserved and every admission check Ready: the job may start."""
    row.phase = Workload.Phase.ADMITTED
    row.admitted_at = now
    row.save()
    workload_event("workload.admitted", row, now, message, cluster_queue=row.cluster_queue_name)
    if row.resumed_from_step is not None:
        workload_event(
            "workload.resumed",
            row,
            now,
            step=row.resumed_from_step,
            message=f"resumed from checkpoint at step {row.resumed_from_step}",
        )
    pods.start(row, now)


def _preempt(
    cluster: Cluster, snap: ClusterSnapshot, preempt: scheduler.Preempt, now: datetime
) -> None:
    preemptor = snap.rows[preempt.preemptor]
    preemptor.preempting = True
    preemptor.save(update_fields=["preempting"])
    for victim in preempt.victims:
        row = snap.rows[victim.workload]
        row.evicting = True
        row.eviction_reason = "Preempted"
        row.preemptions += 1
        row.save(update_fields=["evicting", "eviction_reason", "preemptions"])
        KubeObject.objects.filter(pk=row.owner_id).update(preemptions=F("preemptions") + 1)
        workload_event(
            "workload.preempted",
            row,
            now,
            reason=victim.reason.value,
            preemptor=preemptor.name,
            preemptor_object=preemptor.owner.key,
            message=(
                f"preempted by {preemptor.owner.key} (workload {preemptor.name}, "
                f"priority {preemptor.priority}): {victim.reason.value}"
            ),
        )


def _mark_pending(row: Workload, pending: scheduler.Pending) -> None:
    reason = pending.reason.value
    if (row.pending_reason, row.pending_message, row.parked) == (
        reason,
        pending.message,
        pending.parked,
    ):
        return
    row.pending_reason, row.pending_message, row.parked = reason, pending.message, pending.parked
    row.save(update_fields=["pending_reason", "pending_message", "parked"])
