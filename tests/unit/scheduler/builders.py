"""Terse builders for scheduler scenarios. Quantities are milli-units: 1 GPU = GPU = 1000."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler import (
    Admission,
    ClusterQueue,
    Cohort,
    Decisions,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    NodeSelectorRequirement,
    Pending,
    PodSet,
    PodSetAssignment,
    Preemption,
    PreemptionPolicy,
    PreemptionReason,
    QueueingStrategy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Snapshot,
    Taint,
    Toleration,
    Workload,
    schedule,
)

GPU = 1000
CPU = 1000

NEVER = PreemptionPolicy.NEVER
LOWER = PreemptionPolicy.LOWER_PRIORITY
LOWER_OR_NEWER = PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
ANY = PreemptionPolicy.ANY
TRY_NEXT = FungibilityPolicy.TRY_NEXT_FLAVOR
MAY_STOP = FungibilityPolicy.MAY_STOP_SEARCH
STRICT = QueueingStrategy.STRICT_FIFO

Quota = int | ResourceQuota
FlavorSpec = Mapping[str, Mapping[str, Quota]]
"""flavor name -> resource -> nominal (int, in milli-units) or a full ResourceQuota."""


def quota(nominal: int, borrow: int | None = None, lend: int | None = None) -> ResourceQuota:
    return ResourceQuota(nominal, borrowing_limit=borrow, lending_limit=lend)


def group(flavors: FlavorSpec) -> ResourceGroup:
    """One resource group covering every resource its flavors list, flavors in the given order."""
    covered: list[str] = []
    for resources in flavors.values():
        covered += [r for r in resources if r not in covered]
    return ResourceGroup(
        tuple(covered),
        tuple(
            FlavorQuotas(
                name,
                {
                    r: q if isinstance(q, ResourceQuota) else ResourceQuota(q)
                    for r, q in res.items()
                },
            )
            for name, res in flavors.items()
        ),
    )


def cq(
    name: str,
    flavors: FlavorSpec | None = None,
    *,
    groups: Iterable[FlavorSpec] = (),
    cohort: str | None = None,
    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
    within: PreemptionPolicy = NEVER,
    reclaim: PreemptionPolicy = NEVER,
    borrow_within: PreemptionPolicy = NEVER,
    threshold: int | None = None,
    when_can_borrow: FungibilityPolicy = MAY_STOP,
    when_can_preempt: FungibilityPolicy = TRY_NEXT,
    preference: FungibilityPreference | None = None,
    active: bool = True,
) -> ClusterQueue:
    specs = ([flavors] if flavors else []) + list(groups)
    return ClusterQueue(
        name=name,
        resource_groups=tuple(group(spec) for spec in specs),
        cohort=cohort,
        queueing_strategy=strategy,
        preemption=Preemption(within, reclaim, borrow_within, threshold),
        flavor_fungibility=FlavorFungibility(when_can_borrow, when_can_preempt, preference),
        active=active,
    )


def gpu_cq(name: str, nominal: int, **kwargs: Any) -> ClusterQueue:
    """A ClusterQueue with one flavor, `default`, holding `nominal` whole GPUs."""
    return cq(name, {"default": {"gpu": nominal * GPU}}, **kwargs)


def cohort(name: str, parent: str | None = None, flavors: FlavorSpec | None = None) -> Cohort:
    return Cohort(name, parent, (group(flavors),) if flavors else ())


def flavor(
    name: str,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Taint] = (),
    tolerations: Iterable[Toleration] = (),
) -> ResourceFlavor:
    return ResourceFlavor(name, dict(labels or {}), tuple(taints), tuple(tolerations))


def req(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key, operator, values)


def pod_set(
    gpu: int = 0,
    count: int = 1,
    *,
    name: str = "main",
    requests: Mapping[str, int] | None = None,
    node_selector: Mapping[str, str] | None = None,
    affinity: Iterable[Iterable[NodeSelectorRequirement]] = (),
    tolerations: Iterable[Toleration] = (),
    min_count: int | None = None,
) -> PodSet:
    """`gpu` whole GPUs per pod unless `requests` (milli-units per pod) is given."""
    return PodSet(
        name,
        count,
        dict(requests) if requests is not None else {"gpu": gpu * GPU},
        dict(node_selector or {}),
        tuple(tuple(term) for term in affinity),
        tuple(tolerations),
        min_count=min_count,
    )


def wl(
    key: str,
    queue: str | None,
    gpu: int = 0,
    *,
    priority: int = 0,
    created: float = 0.0,
    pod_sets: Iterable[PodSet] | None = None,
    preempting: bool = False,
    parked: bool = False,
    **pod_set_args: Any,
) -> Workload:
    """A pending workload in ClusterQueue `queue` (None: its LocalQueue does not exist)."""
    sets = tuple(pod_sets) if pod_sets is not None else (pod_set(gpu, **pod_set_args),)
    return Workload(key, queue, priority, created, sets, preempting=preempting, parked=parked)


def admitted(
    key: str,
    queue: str,
    gpu: int = 0,
    *,
    flavor: str = "default",
    priority: int = 0,
    created: float = -100.0,
    reserved_at: float = 0.0,
    evicting: bool = False,
    requests: Mapping[str, int] | None = None,
    count: int = 1,
) -> Workload:
    """A workload holding quota in `queue`, every resource on `flavor`."""
    sets = (pod_set(gpu, count, requests=requests),)
    assignment = PodSetAssignment("main", dict.fromkeys(sets[0].requests, flavor), count)
    return Workload(
        key,
        queue,
        priority,
        created,
        sets,
        admission=Admission(queue, (assignment,)),
        quota_reserved_at=reserved_at,
        evicting=evicting,
    )


def snapshot(
    queues: Iterable[ClusterQueue],
    workloads: Iterable[Workload] = (),
    *,
    cohorts: Iterable[Cohort] = (),
    flavors: Iterable[ResourceFlavor] = (),
) -> Snapshot:
    """Flavors named by a queue or cohort but not given explicitly exist with no labels."""
    queues, cohorts = list(queues), list(cohorts)
    known = {f.name: f for f in flavors}
    for holder in [*queues, *cohorts]:
        for rg in holder.resource_groups:
            for fq in rg.flavors:
                known.setdefault(fq.name, ResourceFlavor(fq.name))
    return Snapshot(
        {q.name: q for q in queues}, {c.name: c for c in cohorts}, known, tuple(workloads)
    )


class Result:
    """The decisions of one `schedule` call, read the way a user would ask about them."""

    def __init__(self, decisions: Decisions):
        self.decisions = decisions
        self.admitted = [a.workload for a in decisions.admitted]
        self.victims: dict[str, PreemptionReason] = {
            v.workload: v.reason for p in decisions.preemptions for v in p.victims
        }
        self.preemptors = {
            p.preemptor: {v.workload for v in p.victims} for p in decisions.preemptions
        }
        self.pending: dict[str, Pending] = {p.workload: p for p in decisions.pending}

    def flavor(self, key: str, resource: str = "gpu", pod_set: str = "main") -> str:
        admit = next(a for a in self.decisions.admitted if a.workload == key)
        assignment = next(p for p in admit.admission.pod_sets if p.name == pod_set)
        return assignment.flavors[resource]

    def counts(self, key: str) -> dict[str, int]:
        """PodSet name -> the pods admitted (partial admission may admit fewer)."""
        admit = next(a for a in self.decisions.admitted if a.workload == key)
        return {p.name: p.count for p in admit.admission.pod_sets}

    def borrowing(self, key: str) -> bool:
        return next(a for a in self.decisions.admitted if a.workload == key).borrowing

    def reason(self, key: str) -> str:
        return self.pending[key].reason.value


def run(
    queues: Iterable[ClusterQueue],
    workloads: Iterable[Workload] = (),
    *,
    cohorts: Iterable[Cohort] = (),
    flavors: Iterable[ResourceFlavor] = (),
) -> Result:
    return Result(schedule(snapshot(queues, workloads, cohorts=cohorts, flavors=flavors)))
