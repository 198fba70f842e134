"""Why a workload is pending, was preempted or is admitted, as Kueue's own arithmetic.

Read-only: the quota numbers come from the scheduler's `QuotaTree` over the same snapshot
admission uses, the flavor verdict from `assign_flavors`, the would-be victims from
`find_targets`, and the queue order from `queue_order`. Quantities are Kubernetes strings
("6", "288Gi", "500m"): exact, and what users wrote in their manifests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import scheduler as s
from events.models import Event
from scheduler.cycle import QueueKey, queue_order
from scheduler.flavors import PODS, Assignment, Mode, assign_flavors, topology_check
from scheduler.model import FlavorResource
from scheduler.preemption import find_targets
from scheduler.quota import NodeKey
from scheduler.state import ClusterState
from teams.visibility import OTHER_TEAMS_MESSAGE, namespace_of
from workloads import checkpoints, runtime, snapshot
from workloads.models import LocalQueue, Workload
from workloads.quantities import format_quantity


def explain(row: Workload, now: datetime) -> dict[str, Any]:
    """JSON-ready: the workload, its status, and for an active one its ClusterQueue's quota per
    flavor and resource, the flavor verdict, the workloads holding what it needs and its place
    in the queue; for one that was preempted, by whom, when and at what cost in steps.

    For a workload holding quota, `used` includes its own usage."""
    cq_name = _cluster_queue_name(row)
    report: dict[str, Any] = {
        "workload": workload_ref(row),
        "status": _status(row),
        "queue": {"local_queue": f"{row.namespace}/{row.queue_name}", "cluster_queue": cq_name},
        "pending": _pending(row),
        "conditions": row.conditions,
        "assignment": row.admission,
        "training": _training(row, now),
        "preemption": _last_preemption(row, now),
        "quota": [],
        "flavors": None,
        "blockers": [],
        "position": None,
    }
    snap = snapshot.load(row.cluster)
    cq = snap.snapshot.cluster_queues.get(cq_name or "")
    if row.phase not in Workload.ACTIVE_PHASES or cq is None:
        report["summary"] = _summary_without_queue(row, cq_name)
        return report
    view = _View(snap, ClusterState(snap.snapshot), cq, _scheduler_workload(row, cq.name))
    if row.phase in Workload.HOLDING_QUOTA:
        report["quota"] = view.quota_rows(view.workload.usage(), held=True)
        report["summary"] = _summary_holding(row, cq.name)
        return report
    report.update(view.pending_report())
    report["position"] = _position(row, cq)
    report["summary"] = _summary_pending(row, report)
    return report


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


def _pending(row: Workload) -> dict[str, Any] | None:
    if row.phase != Workload.Phase.PENDING:
        return None
    return {
        "reason": row.pending_reason,
        "message": row.pending_message,
        "parked": row.parked,
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


def _cluster_queue_name(row: Workload) -> str | None:
    """Where it holds quota, else where its LocalQueue points (None: no such LocalQueue)."""
    if row.admission:
        return str(row.admission["cluster_queue"])
    return (
        LocalQueue.objects.filter(cluster=row.cluster, namespace=row.namespace, name=row.queue_name)
        .values_list("cluster_queue_name", flat=True)
        .first()
    )


def _scheduler_workload(row: Workload, cq_name: str) -> s.Workload:
    return s.Workload(
        key=f"{row.namespace}/{row.name}",
        cluster_queue=cq_name,
        priority=row.priority,
        created=row.queued_at.timestamp(),
        pod_sets=snapshot.pod_sets(row.pod_sets),
        admission=snapshot.admission(row.admission),
        evicting=row.evicting,
        preempting=row.preempting,
        parked=row.parked,
    )


def _total_requests(workload: s.Workload, cq: s.ClusterQueue) -> dict[str, int]:
    """Per resource, summed over PodSets, counted as flavor assignment counts them."""
    totals: dict[str, int] = {}
    covers_pods = any(PODS in g.covered_resources for g in cq.resource_groups)
    for pod_set in workload.pod_sets:
        requests = {r: v * pod_set.count for r, v in pod_set.requests.items() if v}
        if covers_pods:
            requests[PODS] = pod_set.count * 1000
        for resource, amount in requests.items():
            totals[resource] = totals.get(resource, 0) + amount
    return totals


def _resource_quota(cq: s.ClusterQueue, fr: FlavorResource) -> s.ResourceQuota | None:
    flavor, resource = fr
    for group in cq.resource_groups:
        for quotas in group.flavors:
            if quotas.name == flavor and resource in quotas.resources:
                return quotas.resources[resource]
    return None


def _mode_name(mode: Mode) -> str:
    """Kueue's spelling of a flavor assignment mode: NoFit, NoCandidates, Preempt, Fit."""
    return "".join(part.capitalize() for part in mode.name.split("_"))


@dataclass(frozen=True, slots=True)
class _View:
    """One workload against its ClusterQueue in the current snapshot."""

    snap: snapshot.ClusterSnapshot
    state: ClusterState
    cq: s.ClusterQueue
    workload: s.Workload

    @property
    def node(self) -> NodeKey:
        return self.state.tree.cq(self.cq.name)

    def quota_rows(
        self, requested: Mapping[FlavorResource, int], *, held: bool = False
    ) -> list[dict[str, Any]]:
        """`held`: the workload holds `requested` already, so `used` includes it."""
        return [self._quota_row(fr, amount, held) for fr, amount in requested.items()]

    def candidate_requests(self) -> dict[FlavorResource, int]:
        """Its total request of each resource in every flavor that could cover it."""
        totals = _total_requests(self.workload, self.cq)
        return {
            (flavor.name, resource): totals[resource]
            for group in self.cq.resource_groups
            for flavor in group.flavors
            for resource in group.covered_resources
            if resource in totals
        }

    def _quota_row(self, fr: FlavorResource, requested: int, held: bool) -> dict[str, Any]:
        tree, node = self.state.tree, self.node
        flavor, resource = fr
        nominal, used, available = (
            tree.nominal(node, fr),
            tree.usage(node, fr),
            tree.available(node, fr),
        )
        # Beyond its own unused nominal quota, what the cohort would lend it now.
        borrowable = max(0, available - max(0, nominal - used))
        quota = _resource_quota(self.cq, fr)
        limit = quota.borrowing_limit if quota else None
        fits = held or requested <= available

        def q(milli: int) -> str:
            return format_quantity(resource, milli)

        return {
            "flavor": flavor,
            "resource": resource,
            "requested": q(requested),
            "nominal": q(nominal),
            "used": q(used),
            "borrowable": q(borrowable),
            "borrowing_limit": None if limit is None else q(limit),
            "lendable": q(self._lendable(quota, nominal)),
            "available": q(available),
            "max_available": q(tree.potential_available(node, fr)),
            "fits": fits,
            "arithmetic": (
                f"holds {q(requested)} of used {q(used)} (nominal {q(nominal)}, "
                f"available {q(available)})"
                if held
                else f"requested {q(requested)} {'<=' if fits else '>'} available "
                f"{q(available)} (nominal {q(nominal)}, used {q(used)}, borrowable {q(borrowable)})"
            ),
            "cohorts": [self._cohort_row(key, fr) for key in tree.ancestors(node)],
        }

    def _lendable(self, quota: s.ResourceQuota | None, nominal: int) -> int:
        """What the cohort may lend to others out of this queue's quota (Kueue lendingLimit)."""
        if self.cq.cohort is None:
            return 0
        if quota is None or quota.lending_limit is None:
            return nominal
        return min(nominal, quota.lending_limit)

    def _cohort_row(self, key: NodeKey, fr: FlavorResource) -> dict[str, Any]:
        tree, resource = self.state.tree, fr[1]
        return {
            "cohort": key[1],
            "quota": format_quantity(resource, tree.subtree_quota(key, fr)),
            "used": format_quantity(resource, tree.usage(key, fr)),
            "available": format_quantity(resource, tree.available(key, fr)),
        }

    def pending_report(self) -> dict[str, Any]:
        quota = self.quota_rows(self.candidate_requests())
        assignment = assign_flavors(self.state, self.workload, self.cq)
        victims = self._victims(assignment)
        short = {(row["flavor"], row["resource"]) for row in quota if not row["fits"]}
        contested = short if assignment.mode is not Mode.FIT else set()
        return {
            "quota": quota,
            "flavors": self._flavor_verdict(assignment, victims),
            "blockers": self._holders(contested, {v.workload for v in victims}),
        }

    def _victims(self, assignment: Assignment) -> list[s.Victim]:
        """Whom admission would preempt for it now, exactly as a scheduling cycle would."""
        if not assignment.needs_preemption_search:
            return []
        return find_targets(
            self.state,
            self.workload,
            self.cq,
            assignment.usage,
            assignment.needs_preemption,
            topology_check(self.state, self.workload, self.cq, assignment),
        )

    def _flavor_verdict(self, assignment: Assignment, victims: list[s.Victim]) -> dict[str, Any]:
        rows = self.snap.fetch(v.workload for v in victims)
        return {
            "mode": _mode_name(assignment.mode),
            "fits": assignment.mode is Mode.FIT,
            "borrowing": assignment.borrowing > 0,
            "reason": assignment.reason.value if assignment.mode is Mode.NO_FIT else None,
            "messages": list(assignment.messages),
            "pod_sets": [
                {"name": p.name, "count": p.count, "flavors": dict(p.flavors)}
                for p in assignment.pod_sets
            ],
            "would_preempt": [
                {**workload_ref(rows[v.workload]), "reason": v.reason.value} for v in victims
            ],
        }

    def _holders(self, contested: set[FlavorResource], victims: set[str]) -> list[dict[str, Any]]:
        """Workloads of its cohort tree holding any of the quota it lacks."""
        holding = {
            w.key: {fr: self.state.usage[w.key].get(fr, 0) for fr in sorted(contested)}
            for w in self.state.in_tree_of(self.cq.name)
        }
        holding = {key: held for key, held in holding.items() if any(held.values())}
        rows = self.snap.fetch(holding)
        return [
            {
                **workload_ref(rows[key]),
                "cluster_queue": rows[key].cluster_queue_name,
                "evicting": rows[key].evicting,
                "holds": _holds(holding[key]),
                "would_be_preempted": key in victims,
            }
            for key in sorted(holding)
        ]


def _holds(usage: Mapping[FlavorResource, int]) -> list[dict[str, str]]:
    return [
        {"flavor": flavor, "resource": resource, "amount": format_quantity(resource, amount)}
        for (flavor, resource), amount in usage.items()
        if amount
    ]


def _position(row: Workload, cq: s.ClusterQueue) -> dict[str, Any]:
    """1-based places in its LocalQueue and ClusterQueue, in Kueue's heap order (sticky
    preemptor, priority, queue timestamp, name); parked workloads keep their place."""
    queues = set(
        LocalQueue.objects.filter(cluster=row.cluster, cluster_queue_name=cq.name).values_list(
            "namespace", "name"
        )
    )
    sticky = cq.queueing_strategy is s.QueueingStrategy.BEST_EFFORT_FIFO
    pending = Workload.objects.filter(cluster=row.cluster, phase=Workload.Phase.PENDING)
    entries = []
    for ns, name, queue, priority, queued_at, preempting in pending.values_list(
        "namespace", "name", "queue_name", "priority", "queued_at", "preempting"
    ):
        if (ns, queue) in queues:
            # Only the ordering fields matter to queue_order; PodSets play no part in it.
            ordered = s.Workload(
                f"{ns}/{name}", cq.name, priority, queued_at.timestamp(), (), preempting=preempting
            )
            entries.append((queue_order(ordered, sticky), (ns, queue)))
    entries.sort()
    key, local_queue = f"{row.namespace}/{row.name}", (row.namespace, row.queue_name)
    return {
        "cluster_queue": _place([k for k, _ in entries], key, cq.name),
        "local_queue": _place(
            [k for k, lq in entries if lq == local_queue], key, f"{row.namespace}/{row.queue_name}"
        ),
    }


def _place(order: list[QueueKey], key: str, name: str) -> dict[str, Any]:
    keys = [entry[-1] for entry in order]
    return {"name": name, "position": keys.index(key) + 1, "pending": len(keys)}


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
    return f"{verb} in ClusterQueue {cq_name} with flavor {flavors or 'none'}"


def _summary_pending(row: Workload, report: Mapping[str, Any]) -> str:
    position = report["position"]["cluster_queue"]
    place = f"position {position['position']} of {position['pending']} in {position['name']}"
    verdict = report["flavors"]
    if verdict["fits"]:
        return f"Fits now; waits for the next scheduling cycle ({place})"
    if verdict["reason"]:  # no flavor can ever take it as it is
        return f"{verdict['reason']} ({place}): {'; '.join(verdict['messages'])}"
    short = [q for q in report["quota"] if not q["fits"]]
    if not short:
        return f"{row.pending_reason or 'Pending'}: {row.pending_message} ({place})"
    needs = "; ".join(f"{q['resource']} in flavor {q['flavor']}: {q['arithmetic']}" for q in short)
    return f"Waiting for quota ({place}): {needs}; held by {len(report['blockers'])} workload(s)"
