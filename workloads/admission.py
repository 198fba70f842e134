"""The one admission service: snapshot -> scheduler -> decisions and events, in one transaction.

`settle` is its entry point: admission and the simulated cluster (runtime.py) at one instant
until nothing changes; `advance` runs it at every instant something happens up to a time.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from operator import attrgetter
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

import scheduler
from clusters.models import Cluster
from controlplane import bulk
from controlplane.prepared import Param, Prepared
from events.models import Event
from events.services import deferred_events, record_events
from workloads import admission_cache, checkpoints, fairsharing, parking, pods, runtime
from workloads.history import admitted_events, preempted_event_row, workload_event_row
from workloads.locks import lock_admission
from workloads.models import KubeObject, Workload
from workloads.snapshot import (
    HEADS_PER_QUEUE,
    ClusterSnapshot,
    Mate,
    admission_json,
    load,
    parked_mates,
    query_active_rows,
    query_waiting_rows,
    queue_specs,
    queued_by,
)

ADMIT_FIELDS = [
    "admission",
    "cluster_queue_name",
    "quota_reserved_at",
    "admitted_at",
    "parked_release",
    "preempting",
    "pending_reason",
    "pending_message",
    "admissions",
    "start_step",
    "resumed_from_step",
    "phase",
]
_admit_values = attrgetter(*ADMIT_FIELDS)
MAX_ROUNDS = 100
# A window of heads that filled up is followed by one this much wider: in effect the rest of
# any queue. Each round reads every workload holding quota again, the simulated cluster binds
# the pods admitted so far between rounds, and a window's end is where the cycles of queues
# stop interleaving as Kueue's do: growing by 2 took ten rounds for 10,000 workloads, by 4 six
# (all admitted in 2.00-2.08 s on PostgreSQL, benchmarks/deep_queue.py), by 64 three
# (1.84-1.90 s), this two. A window that does not fill is not widened.
WINDOW_GROWTH = 1024


def settle(cluster: Cluster, now: datetime, max_admissions: int | None = None) -> None:
    """Admission and the simulated cluster, round after round, until nothing changes at `now`.

    `max_admissions` caps admissions at this instant (see `scheduler.schedule`).
    """
    budget = max_admissions
    heads = HEADS_PER_QUEUE
    for round_number in range(MAX_ROUNDS):
        changed = False
        # After the first round, admission runs again only if something waits: the scheduler
        # decides nothing without a pending workload, and reloading the cluster to find that
        # out cost a second full round after every submission.
        if (budget is None or budget > 0) and (
            round_number == 0 or _anything_pending(cluster, now)
        ):
            decisions = admit_pending(cluster, now, budget, heads)
            if budget is not None:
                budget -= len(decisions.admitted)
            if len(decisions.admitted) >= heads:
                # A deep queue: a wider window next round rather than a round per window.
                heads *= WINDOW_GROWTH
            changed = bool(
                decisions.admitted
                or decisions.preemptions
                or any(p.parked for p in decisions.pending)
            )
        if not (_simulate_round(cluster, now, first=round_number == 0) or changed):
            return


def _anything_pending(cluster: Cluster, now: datetime) -> bool:
    """Whether a workload queued by `now` waits (`queued_by`)."""
    return bool(_PENDING.rows(cluster=cluster.pk, now=now))


# Built once (controlplane/prepared.py): asked after every round that changed something.
_PENDING = Prepared(
    lambda: (
        Workload.objects.filter(
            cluster_id=Param("cluster"),
            phase=Workload.Phase.PENDING,
            queued_at__lte=Param("now", Workload._meta.get_field("queued_at")),
        )
        .order_by()
        .values_list("pk", flat=True)[:1]
    )
)


def _simulate_round(cluster: Cluster, now: datetime, *, first: bool) -> bool:
    """The simulated cluster's round under the admission lock: two workers settling one
    cluster would otherwise both stop the same evicted workload, and a checkpoint (which locks
    its owner) could interleave with a preemption (which updates it) and deadlock. Its events
    are inserted last, so the event log's lock is not held while the round goes on."""
    with transaction.atomic(), deferred_events():
        lock_admission(cluster)
        return runtime.simulate_round(cluster, now, first=first)


def advance(cluster: Cluster, start: datetime, end: datetime) -> None:
    """Settle at `start`, then at every instant the simulated cluster changes until `end`."""
    settle(cluster, start)
    while (at := runtime.next_event_at(cluster)) is not None and at <= end:
        settle(cluster, at)


def tick_live() -> list[int]:
    """Live mode (Celery beat): every running sim cluster catches up with everything due now;
    the releases of capacity due to be counted that no run counted are counted. Returns the
    ids of the clusters advanced."""
    now = timezone.now()
    advanced = []
    for cluster in Cluster.objects.filter(status=Cluster.Status.RUNNING, provider="sim"):
        advance(cluster, now, now)
        advanced.append(cluster.pk)
    parking.count_noted(now)
    return advanced


def admit_pending(
    cluster: Cluster,
    now: datetime,
    max_admissions: int | None = None,
    heads_per_queue: int = HEADS_PER_QUEUE,
) -> scheduler.Decisions:
    """Run Kueue's scheduling cycles over the cluster and persist every decision.

    Only the first `heads_per_queue` pending workloads of each LocalQueue are considered.
    """
    with _collection_paused(), transaction.atomic(), deferred_events():
        lock_admission(cluster)
        queues = queue_specs(cluster)
        if fairsharing.sample(cluster, now, queues.config.admission_fair_sharing):
            queues = queue_specs(cluster)  # with the LocalQueues' usage it sampled
        if settings.ADMISSION_CACHE:
            rows, waiting = admission_cache.active_rows, admission_cache.waiting_rows
        else:
            rows, waiting = query_active_rows, query_waiting_rows
        rows, waiting = queued_by(now, rows), queued_by(now, waiting)
        snap = load(cluster, heads_per_queue, rows, parking.counted(cluster.pk, now), queues)
        decisions = scheduler.schedule(snap.snapshot, max_admissions=max_admissions)
        # Read before anything is written: the rows as the run found them.
        mates = parked_mates(snap, queues, decisions.pending, waiting)
        _Writer(cluster, snap, now).write(decisions, mates)
        _charge_local_queues(snap, decisions)
    return decisions


@contextmanager
def _collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for an admission run. A deep queue's run
    makes hundreds of thousands of objects that live until it ends, none in a reference cycle
    (reference counting frees them): each full collection they set off walked the whole heap
    for nothing, a quarter of the run of 10,000 admissions. Cycles made meanwhile, by any
    thread, wait for the collection after it."""
    if not gc.isenabled():  # another run, or the process, paused it: leave it as it is
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _charge_local_queues(snap: ClusterSnapshot, decisions: scheduler.Decisions) -> None:
    """Admission fair sharing: what the admitted workloads cost their LocalQueues."""
    config = snap.snapshot.config.admission_fair_sharing
    if config is None or not decisions.admitted:
        return
    by_key = {w.key: w for w in snap.snapshot.workloads}
    admitted = [replace(by_key[a.workload], admission=a.admission) for a in decisions.admitted]
    fairsharing.charge(snap.cluster, config, snap.snapshot.cluster_queues, admitted)


class _Writer:
    def __init__(self, cluster: Cluster, snap: ClusterSnapshot, now: datetime):
        self.cluster, self.snap, self.now = cluster, snap, now
        self.events: list[Event] = []
        self.admissions: dict[Hashable, tuple[dict[str, Any], str]] = {}

    def write(self, decisions: scheduler.Decisions, mates: Sequence[Mate]) -> None:
        """The decisions, and the workloads parked beside them past the run's window."""
        keys = [a.workload for a in decisions.admitted]
        keys += [p.preemptor for p in decisions.preemptions]
        keys += [v.workload for p in decisions.preemptions for v in p.victims]
        rows = self.snap.fetch_to_write(keys)
        if decisions.admitted:
            self._admit(decisions.admitted, rows)
        if decisions.preemptions:
            self._preempt(decisions.preemptions, rows)
        self._mark_pending([*decisions.pending, *self.snap.held], mates)
        record_events(self.events)

    def _admit(self, admits: Iterable[scheduler.Admit], rows: dict[str, Workload]) -> None:
        admitted, updates = [], []
        latest = checkpoints.latest_steps({rows[a.workload].owner_id for a in admits})
        for admit in admits:
            row = rows[admit.workload]
            cq = admit.admission.cluster_queue
            row.admission, flavor = self._converted(admit.admission)
            row.cluster_queue_name = cq
            row.quota_reserved_at = self.now
            row.parked_release, row.preempting = None, False
            row.pending_reason = row.pending_message = ""
            row.admissions += 1
            step = latest.get(row.owner_id)
            row.start_step = step or 0
            row.resumed_from_step = step if step is not None and row.admissions > 1 else None
            self.events.append(
                workload_event_row(
                    "workload.quota_reserved",
                    row,
                    self.now,
                    f"quota reserved in ClusterQueue {cq} with flavor {flavor}",
                    cluster_queue=cq,
                    flavor=flavor,
                    borrowing=admit.borrowing,
                )
            )
            if self.snap.snapshot.cluster_queues[cq].admission_checks:
                row.phase = Workload.Phase.QUOTA_RESERVED
            else:
                admitted.append(row)
                self.events += admitted_events(
                    row, self.now, f"admitted by ClusterQueue {cq} with flavor {flavor}"
                )
            updates.append((row.pk, *_admit_values(row)))
        bulk.update_rows(Workload, "pk", ADMIT_FIELDS, updates)
        pods.start(admitted, self.now, self.snap.flavor_specs)

    def _converted(self, admission: scheduler.Admission) -> tuple[dict[str, Any], str]:
        """The admission's JSON and flavor text. A deep queue's admissions are mostly alike:
        each distinct one is converted once, and its rows share the JSON (encoded once, `bulk`)."""
        key = _admission_key(admission)
        if key not in self.admissions:
            self.admissions[key] = admission_json(admission), _flavor_text(admission)
        return self.admissions[key]

    def _preempt(self, preemptions: Sequence[scheduler.Preempt], rows: dict[str, Workload]) -> None:
        # The scheduler never names a victim twice in one run.
        preemptors = [rows[p.preemptor].pk for p in preemptions]
        bulk.update_keys(Workload, "pk", preemptors, preempting=True)
        by_reason: dict[str, list[int]] = {}
        owners: Counter[int] = Counter()
        for preempt in preemptions:
            preemptor = rows[preempt.preemptor]
            for victim in preempt.victims:
                row, reason = rows[victim.workload], victim.reason.value
                by_reason.setdefault(reason, []).append(row.pk)
                owners[row.owner_id] += 1
                self.events.append(preempted_event_row(row, self.now, reason, preemptor))
        for reason, pks in by_reason.items():
            Workload.objects.filter(pk__in=pks).update(
                evicting=True,
                eviction_reason="Preempted",
                preemption_reason=reason,
                preemptions=F("preemptions") + 1,
            )
        # A Deployment's or LeaderWorkerSet's workloads share their owner.
        by_count: dict[int, list[int]] = {}
        for owner_id, count in owners.items():
            by_count.setdefault(count, []).append(owner_id)
        for count, owner_ids in by_count.items():
            KubeObject.objects.filter(pk__in=owner_ids).update(preemptions=F("preemptions") + count)

    def _mark_pending(self, pending: Iterable[scheduler.Pending], mates: Sequence[Mate]) -> None:
        changes, parking_only = self.snap.pending_changes(pending)
        for pk, state, stored in mates:
            changes[pk] = state
            if stored == state[:2]:
                parking_only.add(pk)
        releases = self.snap.releases
        bulk.update_rows(
            Workload,
            "pk",
            ["pending_reason", "pending_message", "parked_release"],
            [
                (pk, reason, message, releases if parked else None)
                for pk, (reason, message, parked) in changes.items()
                if pk not in parking_only
            ],
        )
        # Most changes of a busy cluster: a workload requeued by a release and parked again
        # for the same reason. They are listed in one row, not updated one by one.
        parking.park_again(self.cluster.pk, releases, [pk for pk in parking_only if changes[pk][2]])
        unparked = [pk for pk in parking_only if not changes[pk][2]]
        bulk.update_keys(Workload, "pk", unparked, parked_release=None)
        waiting = scheduler.PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS.value
        # Its victims (perhaps another entry's) are stopping: it keeps the queue head.
        preempting = [pk for pk, (reason, _, _) in changes.items() if reason == waiting]
        bulk.update_keys(Workload, "pk", preempting, preempting=True)


def _admission_key(admission: scheduler.Admission) -> Hashable:
    """Equal for equal admissions (whose flavor maps, dicts, hash not)."""
    return admission.cluster_queue, tuple(
        (p.name, tuple(p.flavors.items()), p.count, p.topology_assignment)
        for p in admission.pod_sets
    )


def _flavor_text(admission: scheduler.Admission) -> str:
    flavors = sorted({f for p in admission.pod_sets for f in p.flavors.values()})
    return ", ".join(flavors) or "no flavor"
