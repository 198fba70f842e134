"""Kueue-semantics admission engine: pure Python, no I/O, deterministic.

Give `schedule` a `Snapshot` of queues, flavors and workloads; it returns `Decisions`
(admit with flavor assignment, preempt victims for a preemptor, or pending with a reason).
`place` binds admitted pods to nodes as kube-scheduler would.
"""

from scheduler.cycle import schedule
from scheduler.model import (
    Admission,
    Admit,
    ClusterQueue,
    Cohort,
    Decisions,
    FlavorFungibility,
    FlavorQuotas,
    FlavorResource,
    FungibilityPolicy,
    NodeSelectorRequirement,
    Pending,
    PendingReason,
    PodSet,
    PodSetAssignment,
    Preempt,
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
    Victim,
    Workload,
    assignment_usage,
)
from scheduler.placement import Node, Pod, place

__all__ = [
    "Admission",
    "Admit",
    "ClusterQueue",
    "Cohort",
    "Decisions",
    "FlavorFungibility",
    "FlavorQuotas",
    "FlavorResource",
    "FungibilityPolicy",
    "Node",
    "NodeSelectorRequirement",
    "Pending",
    "PendingReason",
    "Pod",
    "PodSet",
    "PodSetAssignment",
    "Preempt",
    "Preemption",
    "PreemptionPolicy",
    "PreemptionReason",
    "QueueingStrategy",
    "ResourceFlavor",
    "ResourceGroup",
    "ResourceQuota",
    "Snapshot",
    "Taint",
    "Toleration",
    "Victim",
    "Workload",
    "assignment_usage",
    "place",
    "schedule",
]
