"""The GKE slice controller behind an `accelerator.gke.io/slice` AdmissionCheck (seeds.md §B.4).

Once a workload's quota is reserved the controller creates one Slice per TPU slice of its
topology assignment; they turn ACTIVE after `ACTIVATION`, and only then is the check Ready
and the workload Admitted. Evicting or ending the workload deletes its slices.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from clusters.catalog import CUBE_TOPOLOGY, LABEL_NODEPOOL, partition_id_label
from clusters.models import Cluster, Node
from events.models import Event
from events.services import record_events
from workloads.history import workload_event_row
from workloads.manifests import ClusterQueueSpec
from workloads.manifests.slices import (
    CUBE_CHIPS,
    SLICE_TOPOLOGY_ANNOTATION,
    SUBSLICE_SHAPES,
    shape_dims,
)
from workloads.models import AdmissionCheck, ClusterQueue, Slice, Workload
from workloads.pods import short_hash

SLICE_CONTROLLER = "accelerator.gke.io/slice"
ACTIVATION = timedelta(seconds=30)
NAME_LIMIT = 49

_Planned = tuple[str, list[str], list[str]]
"""(topology shape, partition ids, hosts) of one slice."""


def slice_checked_queues(cluster: Cluster) -> set[str]:
    """ClusterQueues with an admission check run by the slice controller."""
    checks = {
        row.name
        for row in AdmissionCheck.objects.filter(cluster=cluster)
        if row.spec.get("controller_name") == SLICE_CONTROLLER
    }
    if not checks:
        return set()
    return {
        row.name
        for row in ClusterQueue.objects.filter(cluster=cluster)
        if checks.intersection(ClusterQueueSpec.from_stored(row.spec).check_names)
    }


def checks_ready(
    cluster: Cluster, rows: Sequence[Workload], now: datetime
) -> tuple[list[Workload], bool]:
    """QuotaReserved workloads whose admission checks are all Ready, and whether any slice
    was created. Other controllers' checks are Ready at once (simulated)."""
    queues = slice_checked_queues(cluster) if rows else set()
    ready: list[Workload] = []
    created = False
    for row in rows:
        if row.cluster_queue_name not in queues:
            ready.append(row)
            continue
        states = list(row.slices.values_list("state", flat=True))
        if not states:
            made = create(row, now)
            created |= bool(made)
            if not made:
                ready.append(row)
        elif all(state == Slice.State.ACTIVE for state in states):
            ready.append(row)
    return ready, created


def create(row: Workload, now: datetime) -> list[Slice]:
    """The Slices of a workload's topology assignment (none when it asks for no TPU slice)."""
    labels = host_labels(row.cluster_id)
    planned = plan(row.pod_sets, row.assignments, labels)
    slices = [
        Slice(
            cluster_id=row.cluster_id,
            workload=row,
            name=slice_name(row, index),
            topology=shape,
            partition_ids=partitions,
            node_pools=sorted({labels[h][LABEL_NODEPOOL] for h in hosts}),
            hosts=hosts,
            created_at=now,
            activates_at=now + ACTIVATION,
        )
        for index, (shape, partitions, hosts) in enumerate(planned)
    ]
    Slice.objects.bulk_create(slices)
    record_events([_event("slice.created", s, row, now, "created") for s in slices])
    return slices


def slice_name(row: Workload, index: int) -> str:
    """At most 49 characters, from namespace, workload and index (as Kueue derives them)."""
    suffix = f"-{short_hash(row.namespace, row.name, row.admissions)}-{index}"
    return row.name[: NAME_LIMIT - len(suffix)].rstrip("-") + suffix


def plan(
    pod_sets: Sequence[Mapping[str, Any]],
    assignments: Iterable[Mapping[str, Any]],
    hosts: Mapping[str, Mapping[str, str]],
) -> list[_Planned]:
    """One entry per TPU slice: a sub-slice per partition its pods hold, a super-slice per
    group of whole cubes (pod sets sharing a partition share its slice)."""
    by_name = {p["name"]: p for p in pod_sets}
    result: dict[tuple[str, str], _Planned] = {}
    for assignment in assignments:
        shape = (by_name[assignment["name"]].get("annotations") or {}).get(
            SLICE_TOPOLOGY_ANNOTATION
        )
        topology = assignment.get("topology")
        if not shape or not topology:
            continue
        names = [d["values"][-1] for d in topology["domains"] if d["values"][-1] in hosts]
        for partitions, members in _groups(shape, names, hosts):
            key = (shape, ",".join(partitions))
            earlier = result.get(key, (shape, partitions, []))[2]
            result[key] = (shape, partitions, sorted({*earlier, *members}))
    return list(result.values())


def _groups(
    shape: str, names: Sequence[str], hosts: Mapping[str, Mapping[str, str]]
) -> list[tuple[list[str], list[str]]]:
    level = partition_id_label(shape if shape in SUBSLICE_SHAPES else CUBE_TOPOLOGY)
    by_partition: dict[str, list[str]] = {}
    for name in names:
        by_partition.setdefault(hosts[name].get(level, ""), []).append(name)
    ids = sorted(by_partition)
    dims = shape_dims(shape) or (4, 4, 4)
    per_slice = 1 if shape in SUBSLICE_SHAPES else max(1, math.prod(dims) // CUBE_CHIPS)
    chunks = [ids[i : i + per_slice] for i in range(0, len(ids), per_slice)]
    return [(chunk, sorted(h for p in chunk for h in by_partition[p])) for chunk in chunks]


def host_labels(cluster_id: int) -> dict[str, dict[str, str]]:
    """Node name -> its labels (the pool's name among them)."""
    return dict(Node.objects.filter(cluster_id=cluster_id).values_list("name", "labels"))


def activate(cluster: Cluster, now: datetime) -> bool:
    """Slices whose activation time has come turn ACTIVE."""
    rows = Slice.objects.filter(
        cluster=cluster, state=Slice.State.ACTIVATING, activates_at__lte=now
    )
    # Checked first: almost every round finds none, and the joined query costs several times
    # an existence check.
    if not rows.exists():
        return False
    due = list(rows.select_related("workload__owner", "workload__cluster"))
    Slice.objects.filter(pk__in=[s.pk for s in due]).update(state=Slice.State.ACTIVE)
    record_events([_event("slice.activated", s, s.workload, now, "is ACTIVE") for s in due])
    return True


def release(rows: Iterable[Workload], now: datetime) -> None:
    """The workloads were evicted or ended: the controller deletes their slices."""
    # Only a pod set asking for a slice topology gets slices (`plan`): most workloads are
    # not looked for (a query per finish was 2% of Kueue's baseline suite, which has none).
    by_pk = {row.pk: row for row in rows if _asks_for_slices(row)}
    if not by_pk:
        return
    slices = list(Slice.objects.filter(workload_id__in=by_pk))
    if not slices:
        return
    Slice.objects.filter(pk__in=[s.pk for s in slices]).delete()
    record_events(
        [_event("slice.deleted", s, by_pk[s.workload_id], now, "deleted") for s in slices]
    )


def _asks_for_slices(row: Workload) -> bool:
    return any(
        (pod_set.get("annotations") or {}).get(SLICE_TOPOLOGY_ANNOTATION)
        for pod_set in row.pod_sets
    )


def next_activation(cluster: Cluster) -> datetime | None:
    pending = Slice.objects.filter(cluster=cluster, state=Slice.State.ACTIVATING)
    return pending.order_by("activates_at").values_list("activates_at", flat=True).first()


def _event(kind: str, item: Slice, row: Workload, now: datetime, what: str) -> Event:
    return workload_event_row(
        kind,
        row,
        now,
        f"slice {item.name} ({item.topology}, partitions {', '.join(item.partition_ids)}) {what}",
        slice=item.name,
        topology=item.topology,
        partitions=list(item.partition_ids),
        hosts=list(item.hosts),
        node_pools=list(item.node_pools),
    )
