"""Admission fair sharing: each LocalQueue's consumed resources, decayed over time.

Kueue's LocalQueue controller (`reconcileConsumedUsage`) samples every `usageSamplingInterval`:
consumed = consumed * (1 - alpha) + what the LocalQueue's admitted workloads hold * alpha, with
alpha = 1 - 0.5^(elapsed / usageHalfLifeTime) (a half-life of 0 resets it). The scheduler adds
an entry penalty (request * alpha(samplingInterval)) for each workload it admits into a
UsageBasedAdmissionFairSharing ClusterQueue. Amounts are in Kubernetes units (cores, bytes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

import scheduler as s
from clusters.models import Cluster
from scheduler.fairsharing import alpha, total_requests
from scheduler.model import AdmissionFairSharing
from workloads.models import LocalQueue, Workload
from workloads.snapshot import admission, pod_sets

Consumed = dict[str, float]


def decayed(old: Mapping[str, float], live: Mapping[str, float], rate: float) -> Consumed:
    """Kueue `CalculateDecayedConsumed`: old * (1 - rate) + live * rate, per resource."""
    names = sorted({*old, *live})
    return {n: old.get(n, 0.0) * (1 - rate) + live.get(n, 0.0) * rate for n in names}


def _live_usage(cluster: Cluster) -> dict[tuple[str, str], Consumed]:
    """(namespace, LocalQueue) -> what its Admitted workloads take now (Kueue's cache
    `LocalQueue.GetAdmittedUsage`: quota reserved while admission checks are pending does
    not count)."""
    usage: dict[tuple[str, str], Consumed] = {}
    rows = Workload.objects.filter(cluster=cluster, phase=Workload.Phase.ADMITTED)
    for namespace, queue, sets, admitted in rows.values_list(
        "namespace", "queue_name", "pod_sets", "admission"
    ):
        workload = s.Workload("", None, 0, 0.0, pod_sets(sets), admission=admission(admitted))
        totals = usage.setdefault((namespace, queue), {})
        for name, amount in total_requests(workload).items():
            totals[name] = totals.get(name, 0.0) + amount
    return usage


def sample(cluster: Cluster, now: datetime, config: AdmissionFairSharing | None) -> bool:
    """Kueue `reconcileConsumedUsage` for every LocalQueue of the cluster whose last sample is
    at least `usageSamplingInterval` old (a LocalQueue never sampled starts its clock now).
    `config`: the cluster's (`snapshot.queue_specs`); None turns it off. Whether it wrote."""
    if config is None:
        return False
    live: dict[tuple[str, str], Consumed] | None = None
    changed = []
    for row in LocalQueue.objects.filter(cluster=cluster):
        if row.usage_sampled_at is None:
            row.usage_sampled_at = now
            changed.append(row)
            continue
        elapsed = (now - row.usage_sampled_at).total_seconds()
        if elapsed < config.usage_sampling_interval:
            continue
        if live is None:
            live = _live_usage(cluster)
        if config.usage_half_life_time == 0:
            row.consumed_resources = {}
        else:
            rate = alpha(elapsed, config.usage_half_life_time)
            row.consumed_resources = decayed(
                row.consumed_resources, live.get((row.namespace, row.name), {}), rate
            )
        row.usage_sampled_at = now
        changed.append(row)
    LocalQueue.objects.bulk_update(changed, ["consumed_resources", "usage_sampled_at"])
    return bool(changed)


def charge(
    cluster: Cluster,
    config: AdmissionFairSharing,
    cluster_queues: Mapping[str, s.ClusterQueue],
    admitted: Iterable[s.Workload],
) -> None:
    """Kueue's entry penalty, folded into the LocalQueue's consumed resources at once (Kueue
    folds it when the workload becomes Admitted)."""
    rate = alpha(config.usage_sampling_interval, config.usage_half_life_time)
    penalties: dict[tuple[str, str], Consumed] = {}
    for workload in admitted:
        if workload.admission is None or workload.local_queue is None:
            continue
        if not cluster_queues[workload.admission.cluster_queue].admission_fair_sharing:
            continue
        namespace, name = workload.local_queue.split("/", 1)
        penalty = penalties.setdefault((namespace, name), {})
        for resource, amount in total_requests(workload).items():
            penalty[resource] = penalty.get(resource, 0.0) + amount * rate
    if not penalties:
        return
    rows = LocalQueue.objects.filter(
        cluster=cluster,
        namespace__in={ns for ns, _ in penalties},
        name__in={n for _, n in penalties},
    )
    changed = []
    for row in rows:
        owed = penalties.get((row.namespace, row.name))
        if owed is None:
            continue
        consumed = dict(row.consumed_resources)
        for resource, amount in owed.items():
            consumed[resource] = consumed.get(resource, 0.0) + amount
        row.consumed_resources = consumed
        changed.append(row)
    LocalQueue.objects.bulk_update(changed, ["consumed_resources"])
