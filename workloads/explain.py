"""Why a workload is pending, was preempted or is admitted, as Kueue's own arithmetic.

Read-only. The numbers are the scheduler's (`scheduler.explain_pending`, `held_quota`: its
quota tree, flavor assignment and preemption over the same snapshot admission uses); this
module adds what the database knows (events, queue positions, who the workloads are) and
formats quantities as Kubernetes strings ("6", "288Gi", "500m"): exact, and what users wrote
in their manifests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import cached_property
from typing import Any

import scheduler as s
from clusters.models import Cluster
from events.models import Event
from teams.visibility import OTHER_TEAMS_MESSAGE, namespace_of
from workloads import checkpoints, parking, queueing, runtime, snapshot
from workloads.models import LocalQueue, Workload
from workloads.quantities import format_quantity


class _ClusterReads:
    """What explaining several workloads of one cluster reads once, whatever their number (a
    Deployment's replicas, a LeaderWorkerSet's groups): the snapshot, where each LocalQueue
    points, each ClusterQueue's pending order and the rows behind scheduler keys."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._orders: dict[str, list[Workload]] = {}
        self._rows: dict[str, Workload] = {}

    @cached_property
    def snapshot(self) -> snapshot.ClusterSnapshot:
        return snapshot.load(self.cluster)

    @cached_property
    def parked(self) -> parking.Parked:
        """At the count the snapshot was read at."""
        return parking.Parked(self.cluster.pk, self.snapshot.releases)

    @cached_property
    def local_queues(self) -> dict[tuple[str, str], str]:
        rows = LocalQueue.objects.filter(cluster=self.cluster)
        fields = rows.values_list("namespace", "name", "cluster_queue_name")
        return {(namespace, name): cq for namespace, name, cq in fields}

    def pending_in_order(self, cq: s.ClusterQueue) -> list[Workload]:
        if cq.name not in self._orders:
            order = queueing.pending_in_order(self.cluster, cq.name, cq.queueing_strategy)
            self._orders[cq.name] = order
        return self._orders[cq.name]

    def fetch(self, keys: Iterable[str]) -> dict[str, Workload]:
        keys = list(keys)
        missing = [key for key in keys if key not in self._rows]
        if missing:
            self._rows.update(self.snapshot.fetch(missing))
        return {key: self._rows[key] for key in keys if key in self._rows}


def explain(row: Workload, now: datetime) -> dict[str, Any]:
    """JSON-ready: the workload, its status, and for an active one its ClusterQueue's quota per
    flavor and resource, the flavor verdict, the workloads holding what it needs and its place
    in the queue; for one that was preempted, by whom, when and at what cost in steps.

    For a workload holding quota, `used` includes its own usage."""
    return explain_all([row], now)[0]


def explain_all(rows: Iterable[Workload], now: datetime) -> list[dict[str, Any]]:
    """`explain` of each row, reading each cluster's state once for all of them."""
    reads: dict[int, _ClusterReads] = {}
    return [
        _explain(row, now, reads.setdefault(row.cluster_id, _ClusterReads(row.cluster)))
        for row in rows
    ]


def _explain(row: Workload, now: datetime, reads: _ClusterReads) -> dict[str, Any]:
    cq_name = _cluster_queue_name(row, reads)
    snap = reads.snapshot
    parked = reads.parked.of(row)
    report: dict[str, Any] = {
        "workload": workload_ref(row),
        "status": _status(row),
        "queue": {"local_queue": f"{row.namespace}/{row.queue_name}", "cluster_queue": cq_name},
        "pending": _pending(row, parked),
        "conditions": row.conditions,
        "assignment": row.admission,
        "training": _training(row, now),
        "preemption": _last_preemption(row, now),
        "quota": [],
        "flavors": None,
        "blockers": [],
        "position": None,
    }
    cq = snap.snapshot.cluster_queues.get(cq_name or "")
    report["fair_sharing"] = _fair_sharing(snap.snapshot, cq) if cq else None
    if row.phase not in Workload.ACTIVE_PHASES or cq is None:
        report["summary"] = _summary_without_queue(row, cq_name)
        return report
    workload = _scheduler_workload(row, cq.name, parked)
    if row.phase in Workload.HOLDING_QUOTA:
        held = s.held_quota(snap.snapshot, workload)
        report["quota"] = [_quota_row(line, held=True) for line in held]
        report["summary"] = _summary_holding(row, cq.name)
        return report
    report.update(_pending_report(workload, reads))
    report["position"] = _position(row, cq, reads)
    report["summary"] = _summary_pending(row, report)
    return report


def _fair_sharing(snap: s.Snapshot, cq: s.ClusterQueue) -> list[dict[str, Any]] | None:
    """With fair sharing on: the weight and weighted share (Kueue's DominantResourceShare,
    "+Inf" for a zero weight that borrows) of the ClusterQueue and each Cohort above it."""
    if not snap.config.fair_sharing:
        return None
    shares = s.shares(snap)

    def entry(kind: str, name: str, weight: float, share: float) -> dict[str, Any]:
        shown: float | str = "+Inf" if math.isinf(share) else round(share, 3)
        return {"kind": kind, "name": name, "weight": weight, "share": shown}

    path = [entry("ClusterQueue", cq.name, cq.fair_weight, shares.cluster_queues[cq.name])]
    name, seen = cq.cohort, set()
    while name and name not in seen:
        seen.add(name)
        cohort = snap.cohorts.get(name)
        weight = cohort.fair_weight if cohort else 1.0
        path.append(entry("Cohort", name, weight, shares.cohorts.get(name, 0.0)))
        name = cohort.parent if cohort else None
    return path


def workload_ref(row: Workload) -> dict[str, Any]:
    """Who a workload is, as users name it: its object, kind and priority (owner loaded)."""
    return {
        "namespace": row.namespace,
        "name": row.name,
        "kind": row.owner.kind,
        "owner": row.owner.name,
        "object": row.owner.key,
        "priority": row.priority,
        "priority_class": row.priority_class_name,
    }


def _iso(at: datetime | None) -> str | None:
    return at.isoformat().replace("+00:00", "Z") if at else None


def _status(row: Workload) -> str:
    if row.evicting:
        return "evicting"
    names = {
        Workload.Phase.PENDING: "pending",
        Workload.Phase.QUOTA_RESERVED: "quota_reserved",
        Workload.Phase.ADMITTED: "admitted",
        Workload.Phase.FINISHED: "finished",
        Workload.Phase.FAILED: "failed",
    }
    return names[Workload.Phase(row.phase)]


def _pending(row: Workload, parked: bool) -> dict[str, Any] | None:
    if row.phase != Workload.Phase.PENDING:
        return None
    return {
        "reason": row.pending_reason,
        "message": row.pending_message,
        "parked": parked,
        "preempting": row.preempting,
    }


def _steps_since_checkpoint(row: Workload, now: datetime) -> tuple[int, int] | None:
    """(current step, latest checkpoint step) of a training workload that is running."""
    if row.owner.kind not in runtime.TRAINING_KINDS or row.training_started_at is None:
        return None
    return runtime.current_step(row, now), checkpoints.latest_step(row)


def _training(row: Workload, now: datetime) -> dict[str, int] | None:
    """A running job's progress: what a preemption now would cost it."""
    steps = _steps_since_checkpoint(row, now)
    if steps is None:
        return None
    current, checkpoint = steps
    return {
        "current_step": current,
        "checkpoint_step": checkpoint,
        "steps_at_risk": max(0, current - checkpoint),
    }


def _last_preemption(row: Workload, now: datetime) -> dict[str, Any] | None:
    """The latest preemption, from the event log (the row keeps only counters)."""
    if not row.preemptions:
        return None
    events = Event.objects.filter(
        cluster=row.cluster.name, namespace=row.namespace, workload_name=row.name
    )
    preempted = events.filter(kind="workload.preempted").order_by("-id").first()
    if preempted is None:
        return None
    evicted = events.filter(kind="workload.evicted", id__gt=preempted.id).order_by("id").first()
    if evicted is not None:
        steps_lost = evicted.data.get("steps_lost")
    else:  # still stopping: what it will lose if it stops now
        steps = _steps_since_checkpoint(row, now)
        steps_lost = max(0, steps[0] - steps[1]) if steps else None
    return {
        "at": _iso(preempted.at),
        "by": _preemptor(row, preempted.data),
        "reason": preempted.data.get("reason"),
        "message": preempted.message,
        OTHER_TEAMS_MESSAGE: preempted.data.get(OTHER_TEAMS_MESSAGE),
        "steps_lost": steps_lost,
        "times_preempted": row.preemptions,
        "steps_lost_total": row.steps_lost,
    }


def _preemptor(row: Workload, data: Mapping[str, Any]) -> dict[str, Any]:
    found = (
        Workload.objects.filter(cluster=row.cluster, name=data.get("preemptor", ""))
        .select_related("owner")
        .first()
    )
    if found is None:  # deleted since: the event still names it, and where it was
        shown = {key: data.get(f"preemptor_{key}") for key in ("object", "priority")}
        namespace = data.get("preemptor_namespace") or namespace_of(shown["object"] or "")
        return {"namespace": namespace or "", "name": data.get("preemptor"), **shown}
    return workload_ref(found)


def _cluster_queue_name(row: Workload, reads: _ClusterReads) -> str | None:
    """Where it holds quota, else where its LocalQueue points (None: no such LocalQueue)."""
    if row.admission:
        return str(row.admission["cluster_queue"])
    return reads.local_queues.get((row.namespace, row.queue_name))


def _scheduler_workload(row: Workload, cq_name: str, parked: bool) -> s.Workload:
    return s.Workload(
        key=f"{row.namespace}/{row.name}",
        cluster_queue=cq_name,
        priority=row.priority,
        created=row.queued_at.timestamp(),
        pod_sets=snapshot.pod_sets(row.pod_sets),
        admission=snapshot.admission(row.admission),
        evicting=row.evicting,
        preempting=row.preempting,
        parked=parked,
    )


def _quota_row(line: s.QuotaLine, held: bool) -> dict[str, Any]:
    def q(milli: int) -> str:
        return format_quantity(line.resource, milli)

    requested, used, available, nominal = line.requested, line.used, line.available, line.nominal
    return {
        "flavor": line.flavor,
        "resource": line.resource,
        "requested": q(requested),
        "nominal": q(nominal),
        "used": q(used),
        "borrowable": q(line.borrowable),
        "borrowing_limit": None if line.borrowing_limit is None else q(line.borrowing_limit),
        "lendable": q(line.lendable),
        "available": q(available),
        "max_available": q(line.max_available),
        "fits": line.fits,
        "arithmetic": (
            f"holds {q(requested)} of used {q(used)} (nominal {q(nominal)}, "
            f"available {q(available)})"
            if held
            else f"requested {q(requested)} {'<=' if line.fits else '>'} available "
            f"{q(available)} (nominal {q(nominal)}, used {q(used)}, "
            f"borrowable {q(line.borrowable)})"
        ),
        "cohorts": [
            {
                "cohort": c.cohort,
                "quota": q(c.quota),
                "used": q(c.used),
                "available": q(c.available),
            }
            for c in line.cohorts
        ],
    }


def _pending_report(workload: s.Workload, reads: _ClusterReads) -> dict[str, Any]:
    found = s.explain_pending(reads.snapshot.snapshot, workload)
    verdict = found.flavors
    rows = reads.fetch(
        [*(v.workload for v in verdict.victims), *(h.workload for h in found.holders)]
    )
    return {
        "quota": [_quota_row(line, held=False) for line in found.quota],
        "flavors": {
            "mode": verdict.mode,
            "fits": verdict.fits,
            "borrowing": verdict.borrowing,
            "reason": verdict.reason.value if verdict.reason else None,
            "messages": list(verdict.messages),
            "pod_sets": [
                {"name": p.name, "count": p.count, "flavors": dict(p.flavors)}
                for p in verdict.pod_sets
            ],
            "would_preempt": [
                {**workload_ref(rows[v.workload]), "reason": v.reason.value}
                for v in verdict.victims
            ],
        },
        "blockers": [
            {
                **workload_ref(rows[h.workload]),
                "cluster_queue": rows[h.workload].cluster_queue_name,
                "evicting": rows[h.workload].evicting,
                "holds": _holds(h.holds),
                "would_be_preempted": h.would_be_preempted,
            }
            for h in found.holders
        ],
    }


def _holds(usage: Mapping[s.FlavorResource, int]) -> list[dict[str, str]]:
    return [
        {"flavor": flavor, "resource": resource, "amount": format_quantity(resource, amount)}
        for (flavor, resource), amount in usage.items()
    ]


def _position(row: Workload, cq: s.ClusterQueue, reads: _ClusterReads) -> dict[str, Any] | None:
    """1-based places in its LocalQueue and ClusterQueue, in Kueue's heap order (sticky
    preemptor, priority, queue timestamp, name); parked workloads keep their place. None if it
    left the queue after `row` was read (an admission run admitted it meanwhile)."""
    order = reads.pending_in_order(cq)
    if not any(w.pk == row.pk for w in order):
        return None
    local_queue = (row.namespace, row.queue_name)
    return {
        "cluster_queue": _place(order, row, cq.name),
        "local_queue": _place(
            [w for w in order if (w.namespace, w.queue_name) == local_queue],
            row,
            f"{row.namespace}/{row.queue_name}",
        ),
    }


def _place(order: list[Workload], row: Workload, name: str) -> dict[str, Any]:
    keys = [(w.namespace, w.name) for w in order]
    return {
        "name": name,
        "position": keys.index((row.namespace, row.name)) + 1,
        "pending": len(keys),
    }


def _summary_without_queue(row: Workload, cq_name: str | None) -> str:
    if row.phase not in Workload.ACTIVE_PHASES:
        return f"{row.phase} at {_iso(row.finished_at)}; it holds no quota"
    if cq_name is None:
        return f"LocalQueue {row.queue_name} does not exist in namespace {row.namespace}"
    return f"ClusterQueue {cq_name} does not exist"


def _summary_holding(row: Workload, cq_name: str) -> str:
    flavors = ", ".join(sorted({f for p in row.assignments for f in p["flavors"].values()}))
    if row.evicting:
        return f"Preempted ({row.preemption_reason}); its pods are stopping, it still holds quota"
    verb = "Admitted" if row.phase == Workload.Phase.ADMITTED else "Quota reserved"
    partial = _partial(row, row.assignments)
    return f"{verb} in ClusterQueue {cq_name} with flavor {flavors or 'none'}{partial}"


def _partial(row: Workload, assignments: Iterable[Mapping[str, Any]]) -> str:
    """The note for a workload admitted, or fitting, with fewer pods than its spec asks."""
    admitted = sum(a["count"] for a in assignments)
    total = sum(p["count"] for p in row.pod_sets)
    return f", with {admitted} of {total} pods (partial admission)" if admitted < total else ""


def _summary_pending(row: Workload, report: Mapping[str, Any]) -> str:
    if report["position"] is None:
        place = "no longer queued: admitted or removed since it was read"
    else:
        position = report["position"]["cluster_queue"]
        place = f"position {position['position']} of {position['pending']} in {position['name']}"
    verdict = report["flavors"]
    if verdict["fits"]:
        partial = _partial(row, verdict["pod_sets"])
        return f"Fits now{partial}; waits for the next scheduling cycle ({place})"
    if verdict["reason"]:  # no flavor can ever take it as it is
        return f"{verdict['reason']} ({place}): {'; '.join(verdict['messages'])}"
    short = [q for q in report["quota"] if not q["fits"]]
    if not short:
        return f"{row.pending_reason or 'Pending'}: {row.pending_message} ({place})"
    needs = "; ".join(f"{q['resource']} in flavor {q['flavor']}: {q['arithmetic']}" for q in short)
    return f"Waiting for quota ({place}): {needs}; held by {len(report['blockers'])} workload(s)"
