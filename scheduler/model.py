"""The scheduler's inputs and outputs: frozen values, no behaviour beyond small derivations.

Quantities are integers in milli-units (Kubernetes' MilliValue): cpu "500m" is 500, a GPU is
1000, memory "1Ki" is 1_024_000. Times are seconds on the caller's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # scheduler.topology imports this module; these are only annotations here
    from scheduler.placement import Node
    from scheduler.topology import Topology, TopologyAssignment, TopologyRequest

FlavorResource = tuple[str, str]
"""(ResourceFlavor name, resource name): the unit in which Kueue accounts quota."""

PODS = "pods"
POD = 1000
"""One pod of the `pods` resource, in milli-units."""


class QueueingStrategy(StrEnum):
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    STRICT_FIFO = "StrictFIFO"


class PreemptionPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
    ANY = "Any"


class FungibilityPolicy(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(StrEnum):
    """`flavorFungibility.preference`: which of two imperfect flavors wins."""

    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    name: str
    resources: Mapping[str, ResourceQuota]


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True, slots=True)
class Preemption:
    within_cluster_queue: PreemptionPolicy = PreemptionPolicy.NEVER
    reclaim_within_cohort: PreemptionPolicy = PreemptionPolicy.NEVER
    borrow_within_cohort: PreemptionPolicy = PreemptionPolicy.NEVER
    max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR
    preference: FungibilityPreference | None = None


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    name: str
    resource_groups: tuple[ResourceGroup, ...] = ()
    cohort: str | None = None
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    preemption: Preemption = field(default_factory=Preemption)
    flavor_fungibility: FlavorFungibility = field(default_factory=FlavorFungibility)
    admission_checks: tuple[str, ...] = ()
    active: bool = True
    """False when stopped (stopPolicy Hold/HoldAndDrain) or misconfigured: admits nothing."""
    fair_weight: float = 1.0
    """`fairSharing.weight`, read only when the Configuration enables fair sharing. 0 makes
    its share infinite as soon as it borrows (Kueue `DRS.PreciseWeightedShare`)."""
    admission_fair_sharing: bool = False
    """`admissionScope.admissionMode: UsageBasedAdmissionFairSharing`: its pending workloads
    are ordered by their LocalQueue's usage first (when the Configuration enables it)."""


@dataclass(frozen=True, slots=True)
class Cohort:
    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_weight: float = 1.0
    """`fairSharing.weight`, as for a ClusterQueue."""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:  # an empty key with Exists tolerates everything
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        if self.operator in ("Gt", "Lt") and value is not None and self.values:
            try:
                left, right = int(value), int(self.values[0])
            except ValueError:
                return False
            return left > right if self.operator == "Gt" else left < right
        return False


NodeSelectorTerm = tuple[NodeSelectorRequirement, ...]


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology_name: str | None = None


@dataclass(frozen=True, slots=True)
class PodSet:
    name: str
    count: int
    requests: Mapping[str, int]
    """Per pod."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology_request: TopologyRequest | None = None
    """Its TAS annotations (`topology.request_from_annotations`); None: it asks for no TAS."""
    min_count: int | None = None
    """Partial admission: the fewest pods it may run with (`job-min-parallelism`)."""


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    name: str
    flavors: Mapping[str, str]
    """resource -> ResourceFlavor name."""
    count: int
    topology_assignment: TopologyAssignment | None = None
    """Where its pods go, when it was placed by Topology Aware Scheduling."""


@dataclass(frozen=True, slots=True)
class Admission:
    cluster_queue: str
    pod_sets: tuple[PodSetAssignment, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    key: str
    """Unique and stable; the last tie-breaker, as the UID is in Kueue."""
    cluster_queue: str | None
    """Resolved through the LocalQueue; None when the LocalQueue does not exist."""
    priority: int
    created: float
    """Queue-order timestamp (creationTimestamp, or eviction time where Kueue uses it)."""
    pod_sets: tuple[PodSet, ...]
    admission: Admission | None = None
    """Set while the workload holds quota (QuotaReserved)."""
    quota_reserved_at: float | None = None
    evicting: bool = False
    """Evicted but its pods have not stopped yet: it still holds its quota."""
    preempting: bool = False
    """Its preemptions are in flight: it stays at the head of its queue (BestEffortFIFO)."""
    parked: bool = False
    """In Kueue's inadmissible set until a capacity event requeues it (BestEffortFIFO)."""
    local_queue: str | None = None
    """"namespace/name" of its LocalQueue, for admission fair sharing."""
    pods_ready: bool = False
    """Its PodsReady condition (all its pods ready); read only under blockAdmission."""

    def usage(self) -> dict[FlavorResource, int]:
        """The quota this workload holds (empty when it holds none)."""
        if self.admission is None:
            return {}
        return assignment_usage(self.pod_sets, self.admission.pod_sets)


def node_charge(requests: Mapping[str, int]) -> dict[str, int]:
    """What one pod asking `requests` takes of its node: its requests and exactly one of the
    node's `pods` (the kube-scheduler counts a node's pods, not what they ask of `pods`)."""
    return {**requests, PODS: POD}


def pod_set_request(requests: Mapping[str, int], resource: str, count: int) -> int:
    """What `count` pods asking `requests` each take of `resource`. A ClusterQueue that
    covers `pods` counts one per pod (Kueue `flavorassigner.assignFlavors` sets the PodSet's
    `pods` request to its count)."""
    if resource == PODS:
        return count * POD
    return requests.get(resource, 0) * count


def assignment_usage(
    pod_sets: tuple[PodSet, ...], assignments: tuple[PodSetAssignment, ...]
) -> dict[FlavorResource, int]:
    usage: dict[FlavorResource, int] = {}
    by_name = {ps.name: ps for ps in pod_sets}
    for assignment in assignments:
        pod_set = by_name[assignment.name]
        for resource, flavor in assignment.flavors.items():
            amount = pod_set_request(pod_set.requests, resource, assignment.count)
            usage[(flavor, resource)] = usage.get((flavor, resource), 0) + amount
    return usage


@dataclass(frozen=True, slots=True)
class AdmissionFairSharing:
    """Kueue's `admissionFairSharing` configuration; durations in seconds."""

    usage_half_life_time: float = 0.0
    """0 resets a LocalQueue's usage at every sample."""
    usage_sampling_interval: float = 300.0
    resource_weights: Mapping[str, float] = field(default_factory=dict)
    """Resource name -> weight in a LocalQueue's usage (1 when absent)."""


@dataclass(frozen=True, slots=True)
class SchedulingConfig:
    """What the scheduler reads of Kueue's Configuration (`config.kueue.x-k8s.io`).

    Defaults are Kueue's: fair sharing off, admission fair sharing off, partial admission on
    (feature gate PartialAdmission, beta), balanced TAS placement off."""

    fair_sharing: bool = False
    fair_sharing_strategies: tuple[str, ...] = (
        "LessThanOrEqualToFinalShare",
        "LessThanInitialShare",
    )
    admission_fair_sharing: AdmissionFairSharing | None = None
    """None: off (Kueue's nil `admissionFairSharing`)."""
    partial_admission: bool = True
    block_admission: bool = False
    """`waitForPodsReady.blockAdmission`: nothing is admitted while an admitted workload's
    pods are not all ready."""
    tas_balanced_placement: bool = False
    """Feature gate TASBalancedPlacement (alpha, off): `preferred` TAS requests are spread
    evenly (scheduler/topology/balanced.py)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    cluster_queues: Mapping[str, ClusterQueue]
    cohorts: Mapping[str, Cohort]
    flavors: Mapping[str, ResourceFlavor]
    workloads: tuple[Workload, ...]
    """Every workload that is pending or holds quota."""
    topologies: Mapping[str, Topology] = field(default_factory=dict)
    """Topology objects by name, for flavors with a topologyName (TAS)."""
    nodes: tuple[Node, ...] = ()
    """The cluster's nodes, for TAS placement."""
    non_tas_usage: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Node name -> resource -> what pods of non-TAS workloads take (each pod also 1000 `pods`)."""
    config: SchedulingConfig = field(default_factory=SchedulingConfig)
    local_queue_usage: Mapping[str, float] = field(default_factory=dict)
    """Admission fair sharing: each LocalQueue's decayed, weighted usage ("namespace/name")."""
    local_queue_weights: Mapping[str, float] = field(default_factory=dict)
    """Each LocalQueue's `fairSharing.weight` (1 when absent), for the entry penalty."""


class PendingReason(StrEnum):
    """QuotaReserved=False reasons (kueue-semantics §15), plus our own for queue problems."""

    NO_MATCHING_FLAVOR = "NoMatchingFlavor"
    WAITING_FOR_QUOTA = "WaitingForQuota"
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
    WAITING_FOR_PREEMPTED_WORKLOADS = "WaitingForPreemptedWorkloads"
    TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"
    """Quota could be had but the PodSet fits its topology nowhere, even with no TAS workload."""
    PREEMPTION_NO_CANDIDATES = "PreemptionNoCandidates"
    """Kueue's requeue reason, not a condition reason: `schedule` no longer emits it. A
    preemption that finds no candidates reports WaitingForQuota, as Kueue's condition does."""
    SKIPPED = "Skipped"
    BLOCKED_BY_HEAD = "BlockedByHead"
    NOT_HEAD = "NotHead"
    MISCONFIGURED = "Misconfigured"
    """Its LocalQueue or their ClusterQueue does not exist (Kueue `getQueueBlocker`)."""
    INACTIVE_CLUSTER_QUEUE = "Suspended"
    """Its ClusterQueue is inactive (stopPolicy, a missing AdmissionCheck): `getQueueBlocker`."""
    LOCAL_QUEUE_STOPPED = "LocalQueueStopped"
    WAITING_FOR_PODS_READY = "WaitingForPodsReady"
    """blockAdmission: it fits, but an admitted workload's pods are not all ready yet."""


class PreemptionReason(StrEnum):
    IN_CLUSTER_QUEUE = "InClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation"
    IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
    IN_COHORT_FAIR_SHARING = "InCohortFairSharing"


@dataclass(frozen=True, slots=True)
class Admit:
    workload: str
    admission: Admission
    borrowing: bool


@dataclass(frozen=True, slots=True)
class Victim:
    workload: str
    reason: PreemptionReason


@dataclass(frozen=True, slots=True)
class Preempt:
    preemptor: str
    victims: tuple[Victim, ...]


@dataclass(frozen=True, slots=True)
class Pending:
    workload: str
    reason: PendingReason
    message: str
    parked: bool


@dataclass(frozen=True, slots=True)
class Decisions:
    admitted: tuple[Admit, ...] = ()
    preemptions: tuple[Preempt, ...] = ()
    pending: tuple[Pending, ...] = ()
    cycles: int = 0
