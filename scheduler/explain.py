"""Why a workload is pending, or what it holds, in Kueue's own numbers (milli-units).

Read-only and over the same snapshot admission uses: the quota numbers come from the
`QuotaTree`, the flavor verdict and the would-be victims from `nominate` (exactly as a
scheduling cycle decides), and the holders from the workloads of its cohort tree.
`workloads/explain.py` formats this for users.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.flavors import Assignment, Mode
from scheduler.model import (
    ClusterQueue,
    FlavorResource,
    PendingReason,
    PodSetAssignment,
    ResourceQuota,
    Snapshot,
    Victim,
    Workload,
    pod_set_request,
)
from scheduler.nomination import nominate
from scheduler.quota import NodeKey, QuotaTree
from scheduler.state import ClusterState


@dataclass(frozen=True, slots=True)
class CohortQuota:
    """One cohort above the ClusterQueue, for one flavor and resource."""

    cohort: str
    quota: int
    """Its subtree's quota."""
    used: int
    available: int


@dataclass(frozen=True, slots=True)
class QuotaLine:
    """A ClusterQueue's quota for one flavor and resource against what the workload asks."""

    flavor: str
    resource: str
    requested: int
    nominal: int
    used: int
    borrowable: int
    """Beyond its own unused nominal quota, what the cohort would lend it now."""
    borrowing_limit: int | None
    lendable: int
    """What the cohort may lend to others out of this queue's quota (Kueue lendingLimit)."""
    available: int
    max_available: int
    """Available once nothing else in the cohort used any quota (`potential_available`)."""
    fits: bool
    cohorts: tuple[CohortQuota, ...]


@dataclass(frozen=True, slots=True)
class FlavorVerdict:
    """What a scheduling cycle would decide for the workload now."""

    mode: str
    """Kueue's spelling of the assignment mode: NoFit, NoCandidates, Preempt, Reclaim, Fit."""
    fits: bool
    borrowing: bool
    reason: PendingReason | None
    """Why no flavor can ever take it as it is (mode NoFit), else None."""
    messages: tuple[str, ...]
    pod_sets: tuple[PodSetAssignment, ...]
    victims: tuple[Victim, ...]


@dataclass(frozen=True, slots=True)
class Holder:
    """A workload of the cohort tree holding quota the pending one lacks."""

    workload: str
    holds: Mapping[FlavorResource, int]
    """Only what it holds of the contested flavors and resources, sorted."""
    would_be_preempted: bool


@dataclass(frozen=True, slots=True)
class PendingExplanation:
    quota: tuple[QuotaLine, ...]
    """Per flavor that could cover each requested resource."""
    flavors: FlavorVerdict
    holders: tuple[Holder, ...]
    """Workloads holding what it lacks, by key; none when it fits."""


def held_quota(snapshot: Snapshot, workload: Workload) -> tuple[QuotaLine, ...]:
    """The quota lines of what a workload holding quota holds (`used` includes it)."""
    view = _View(snapshot, workload)
    return tuple(view.quota_line(fr, amount, held=True) for fr, amount in workload.usage().items())


def explain_pending(snapshot: Snapshot, workload: Workload) -> PendingExplanation:
    """A pending workload against its ClusterQueue (`workload.cluster_queue`, which must be in
    the snapshot)."""
    view = _View(snapshot, workload)
    quota = tuple(
        view.quota_line(fr, amount, held=False) for fr, amount in view.candidate_requests().items()
    )
    assignment, victims = nominate(
        view.state, workload, view.cq, partial_admission=snapshot.config.partial_admission
    )
    short = {(line.flavor, line.resource) for line in quota if not line.fits}
    contested = short if assignment.mode is not Mode.FIT else set()
    return PendingExplanation(
        quota=quota,
        flavors=_verdict(assignment, victims),
        holders=view.holders(contested, {v.workload for v in victims}),
    )


def _verdict(assignment: Assignment, victims: list[Victim]) -> FlavorVerdict:
    return FlavorVerdict(
        mode="".join(part.capitalize() for part in assignment.mode.name.split("_")),
        fits=assignment.mode is Mode.FIT,
        borrowing=assignment.borrowing > 0,
        reason=assignment.reason if assignment.mode is Mode.NO_FIT else None,
        messages=tuple(assignment.messages),
        pod_sets=tuple(assignment.pod_sets),
        victims=tuple(victims),
    )


def _total_requests(workload: Workload, cq: ClusterQueue) -> dict[str, int]:
    """Per resource the ClusterQueue covers, summed over PodSets, counted as flavor assignment
    counts them (`pods`: one per pod)."""
    covered = {r for group in cq.resource_groups for r in group.covered_resources}
    totals: dict[str, int] = {}
    for pod_set in workload.pod_sets:
        for resource in covered:
            amount = pod_set_request(pod_set.requests, resource, pod_set.count)
            if amount:
                totals[resource] = totals.get(resource, 0) + amount
    return totals


def _resource_quota(cq: ClusterQueue, fr: FlavorResource) -> ResourceQuota | None:
    flavor, resource = fr
    for group in cq.resource_groups:
        for quotas in group.flavors:
            if quotas.name == flavor and resource in quotas.resources:
                return quotas.resources[resource]
    return None


def _cohort_quota(tree: QuotaTree, key: NodeKey, fr: FlavorResource) -> CohortQuota:
    used, available = tree.usage(key, fr), tree.available(key, fr)
    return CohortQuota(key[1], tree.subtree_quota(key, fr), used, available)


class _View:
    """One workload against its ClusterQueue in a snapshot."""

    def __init__(self, snapshot: Snapshot, workload: Workload):
        assert workload.cluster_queue is not None  # callers explain only queued workloads
        self.state = ClusterState(snapshot)
        self.cq = snapshot.cluster_queues[workload.cluster_queue]
        self.workload = workload
        self.node: NodeKey = self.state.tree.cq(self.cq.name)

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

    def quota_line(self, fr: FlavorResource, requested: int, *, held: bool) -> QuotaLine:
        """`held`: the workload holds `requested` already, so `used` includes it."""
        tree, node = self.state.tree, self.node
        nominal, used, available = (
            tree.nominal(node, fr),
            tree.usage(node, fr),
            tree.available(node, fr),
        )
        quota = _resource_quota(self.cq, fr)
        return QuotaLine(
            flavor=fr[0],
            resource=fr[1],
            requested=requested,
            nominal=nominal,
            used=used,
            borrowable=max(0, available - max(0, nominal - used)),
            borrowing_limit=quota.borrowing_limit if quota else None,
            lendable=self._lendable(quota, nominal),
            available=available,
            max_available=tree.potential_available(node, fr),
            fits=held or requested <= available,
            cohorts=tuple(_cohort_quota(tree, key, fr) for key in tree.ancestors(node)),
        )

    def _lendable(self, quota: ResourceQuota | None, nominal: int) -> int:
        if self.cq.cohort is None:
            return 0
        if quota is None or quota.lending_limit is None:
            return nominal
        return min(nominal, quota.lending_limit)

    def holders(self, contested: set[FlavorResource], victims: set[str]) -> tuple[Holder, ...]:
        """Workloads of its cohort tree holding any of the quota it lacks."""
        holding = {
            w.key: {
                fr: amount
                for fr in sorted(contested)
                if (amount := self.state.usage[w.key].get(fr, 0))
            }
            for w in self.state.in_tree_of(self.cq.name)
        }
        return tuple(
            Holder(key, holding[key], key in victims) for key in sorted(holding) if holding[key]
        )
