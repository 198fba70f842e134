"""Kueue objects, the Kubernetes objects users apply, Kueue workloads, pods, checkpoints, events.

Every Kueue object keeps its normalised `spec` (quantities in milli-units) and the manifest
as it was applied; the columns duplicate what queries filter on.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models
from django.db.models.deletion import Collector

from clusters.models import Cluster, ClusterStamp, Node


class QueueObject(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=253)
    spec = models.JSONField(default=dict)
    manifest = models.JSONField(default=dict, help_text="As applied; empty if made in the UI")
    managed_elsewhere = models.BooleanField(
        default=False,
        help_text="Read from the cluster (made with kubectl, Helm, ...): Accelplane applies "
        "to it only once an admin adopts it",
    )
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    KIND = ""
    NAMESPACED = False
    SINGLETON = False
    """One per cluster, whatever its name (Configuration)."""

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def key(self) -> str:
        return f"{self.KIND}/{self.name}"


def _unique(model: str, *fields: str) -> list[models.BaseConstraint]:
    return [models.UniqueConstraint(fields=["cluster", *fields], name=f"unique_{model}")]


class ResourceFlavor(QueueObject):
    KIND = "ResourceFlavor"

    class Meta(QueueObject.Meta):
        constraints = _unique("resourceflavor", "name")


class Cohort(QueueObject):
    KIND = "Cohort"
    parent_name = models.CharField(max_length=253, blank=True)

    class Meta(QueueObject.Meta):
        constraints = _unique("cohort", "name")


class ClusterQueue(QueueObject):
    KIND = "ClusterQueue"
    cohort_name = models.CharField(max_length=253, blank=True, db_index=True)

    class Meta(QueueObject.Meta):
        constraints = _unique("clusterqueue", "name")


class LocalQueue(QueueObject):
    KIND = "LocalQueue"
    NAMESPACED = True
    namespace = models.CharField(max_length=63)
    cluster_queue_name = models.CharField(max_length=253, db_index=True)
    consumed_resources = models.JSONField(
        default=dict,
        help_text="Admission fair sharing: decayed usage, resource -> Kubernetes units "
        "(Kueue status.fairSharing.admissionFairSharingStatus.consumedResources)",
    )
    usage_sampled_at = models.DateTimeField(
        null=True, blank=True, help_text="When consumed_resources was last decayed (lastUpdate)"
    )

    class Meta(QueueObject.Meta):
        ordering = ["namespace", "name"]
        constraints = _unique("localqueue", "namespace", "name")

    @property
    def key(self) -> str:
        return f"{self.KIND}/{self.namespace}/{self.name}"


class WorkloadPriorityClass(QueueObject):
    KIND = "WorkloadPriorityClass"
    value = models.IntegerField()

    class Meta(QueueObject.Meta):
        constraints = _unique("workloadpriorityclass", "name")


class PriorityClass(QueueObject):
    KIND = "PriorityClass"
    value = models.IntegerField()
    global_default = models.BooleanField(default=False)

    class Meta(QueueObject.Meta):
        constraints = _unique("priorityclass", "name")


class Topology(QueueObject):
    KIND = "Topology"

    class Meta(QueueObject.Meta):
        constraints = _unique("topology", "name")


class AdmissionCheck(QueueObject):
    KIND = "AdmissionCheck"

    class Meta(QueueObject.Meta):
        constraints = _unique("admissioncheck", "name")


class Configuration(QueueObject):
    """Kueue's Configuration: one per cluster, applying another replaces it."""

    KIND = "Configuration"
    SINGLETON = True

    class Meta(QueueObject.Meta):
        constraints = [models.UniqueConstraint(fields=["cluster"], name="unique_configuration")]


QUEUE_MODELS: dict[str, type[QueueObject]] = {
    m.KIND: m
    for m in (
        ResourceFlavor,
        Cohort,
        ClusterQueue,
        LocalQueue,
        WorkloadPriorityClass,
        PriorityClass,
        Topology,
        AdmissionCheck,
        Configuration,
    )
}


class KubeObject(models.Model):
    """An object a user applied (Job, Deployment, JobSet, LeaderWorkerSet, Service, ...)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="kube_objects")
    api_version = models.CharField(max_length=128)
    kind = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    manifest = models.JSONField(help_text="Verbatim as applied (after scale, with new replicas)")
    simulation = models.JSONField(default=dict, help_text="How the simulator runs it")
    preemptions = models.PositiveIntegerField(default=0, help_text="Of all its workloads, ever")
    generation = models.PositiveIntegerField(default=1)
    managed_elsewhere = models.BooleanField(
        default=False,
        help_text="Not submitted through Accelplane: the owner of a Kueue Workload read from "
        "the cluster, known by kind, namespace and name only (manifest empty)",
    )
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["namespace", "kind", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "kind", "namespace", "name"], name="unique_kube_object"
            )
        ]
        # A submission asks which of its names exist in the cluster, whatever their kind
        # and namespace (services._EXISTING_AND_PRIORITIES): without it, every submission
        # read all of the cluster's objects.
        indexes = [models.Index(fields=["cluster", "name"], name="kube_object_name_idx")]

    def __str__(self) -> str:
        return self.key

    @property
    def key(self) -> str:
        if self.namespace:
            return f"{self.kind}/{self.namespace}/{self.name}"
        return f"{self.kind}/{self.name}"


class Workload(models.Model):
    """A Kueue Workload: one per Job/JobSet, per Deployment pod, per LeaderWorkerSet group."""

    class Phase(models.TextChoices):
        PENDING = "Pending"
        QUOTA_RESERVED = "QuotaReserved"
        ADMITTED = "Admitted"
        FINISHED = "Finished"
        FAILED = "Failed"

    HOLDING_QUOTA = (Phase.QUOTA_RESERVED, Phase.ADMITTED)
    ACTIVE_PHASES = (Phase.PENDING, Phase.QUOTA_RESERVED, Phase.ADMITTED)

    # Its own index stays though others lead with it: on SQLite it ends with the rowid and
    # answers `cluster = ? AND rowid IN (...)` (snapshot.rows_to_write) by seeks.
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="workloads")
    owner = models.ForeignKey(KubeObject, on_delete=models.CASCADE, related_name="workloads")
    name = models.CharField(max_length=253)
    namespace = models.CharField(max_length=63)
    replica_index = models.PositiveIntegerField(default=0)
    queue_name = models.CharField(max_length=253)
    cluster_queue_name = models.CharField(max_length=253, blank=True)
    priority = models.IntegerField(default=0)
    priority_class_name = models.CharField(max_length=253, blank=True)
    pod_sets = models.JSONField(help_text="PodSets as Kueue builds them; requests in milli-units")
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.PENDING)
    admission = models.JSONField(null=True, blank=True)
    queued_at = models.DateTimeField(help_text="Queue-order timestamp (creation)")
    quota_reserved_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    pending_reason = models.CharField(max_length=64, blank=True)
    pending_message = models.TextField(blank=True)
    parked_release = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="In Kueue's inadmissible set while the cluster's capacity releases "
        "(WorkloadChangeLog.releases) are still this many, or while a ParkedSet of their "
        "count lists it; none: not parked, whatever a ParkedSet lists",
    )
    preempting = models.BooleanField(default=False, help_text="Waiting for its victims to stop")
    evicting = models.BooleanField(default=False, help_text="Evicted; pods still stopping")
    eviction_reason = models.CharField(max_length=64, blank=True)
    preemption_reason = models.CharField(max_length=64, blank=True, help_text="Latest one")
    admissions = models.PositiveIntegerField(default=0)
    preemptions = models.PositiveIntegerField(default=0)
    # waitForPodsReady (Kueue's PodsReady condition, status.requeueState, spec.active).
    pods_ready = models.BooleanField(default=False, help_text="PodsReady condition status")
    pods_ready_changed_at = models.DateTimeField(
        null=True, blank=True, help_text="PodsReady's last transition; null: never ready yet"
    )
    requeue_count = models.PositiveIntegerField(default=0, help_text="requeueState.count")
    requeue_at = models.DateTimeField(
        null=True, blank=True, help_text="requeueState.requeueAt: queued again from then"
    )
    active = models.BooleanField(default=True, help_text="spec.active; false: deactivated")
    # Simulated training progress (Jobs and JobSets).
    start_step = models.PositiveIntegerField(default=0)
    training_started_at = models.DateTimeField(null=True, blank=True)
    resumed_from_step = models.PositiveIntegerField(null=True, blank=True)
    steps_lost = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["queued_at", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "name"], name="unique_workload_name"
            )
        ]
        # Every simulator step asks for the evicting workloads of a cluster.
        indexes = [
            models.Index(fields=["cluster", "phase"]),
            models.Index(fields=["cluster", "evicting"]),
            # The few in a requeuing back-off, without walking a deep queue's pending rows.
            models.Index(
                fields=["cluster", "phase", "requeue_at"],
                condition=models.Q(requeue_at__isnull=False),
                name="workload_requeue_at_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def conditions(self) -> list[dict[str, str]]:
        """Kueue's status conditions, derived from the fields that decide them (§15)."""

        def condition(kind: str, holds: bool, reason: str, message: str = "") -> dict[str, str]:
            status = "True" if holds else "False"
            return {"type": kind, "status": status, "reason": reason, "message": message}

        reserved = self.phase in self.HOLDING_QUOTA
        result = [
            condition(
                "QuotaReserved",
                reserved,
                "QuotaReserved" if reserved else self.pending_reason or "Pending",
                f"Quota reserved in ClusterQueue {self.cluster_queue_name}"
                if reserved
                else self.pending_message,
            ),
            condition(
                "Admitted",
                self.phase == self.Phase.ADMITTED,
                "Admitted" if self.phase == self.Phase.ADMITTED else "NoReservation",
            ),
        ]
        if self.preemptions:
            result.append(condition("Preempted", self.evicting, self.preemption_reason))
            result.append(condition("Requeued", not self.evicting, "Preempted"))
        if self.phase in (self.Phase.FINISHED, self.Phase.FAILED):
            result.append(condition("Finished", True, self.phase))
        return result

    @property
    def assignments(self) -> list[dict[str, Any]]:
        """PodSet assignments (name, flavors, count) of the admission; empty while pending."""
        return list((self.admission or {}).get("pod_sets", []))


def reschedule(
    collector: Collector, field: models.Field[Any, Any], sub_objs: Any, using: str
) -> None:
    """Pod.node's on_delete: a pod whose node goes is pending and unbound again, as Kubernetes
    reschedules a deleted node's pods (a node pool shrunk or deleted)."""
    for name, value in (
        ("node", None),
        ("phase", "Pending"),
        ("ready", False),
        ("bound_at", None),
        ("ready_at", None),
    ):
        updated = field.model._meta.get_field(name)
        assert isinstance(updated, models.Field)
        collector.add_field_update(updated, value, sub_objs)


class Pod(models.Model):
    class Phase(models.TextChoices):
        SCHEDULING_GATED = "SchedulingGated"
        PENDING = "Pending"
        RUNNING = "Running"
        SUCCEEDED = "Succeeded"
        FAILED = "Failed"

    # No index of its own: `unique_pod` and the (cluster, phase, node) index lead with it.
    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="pods", db_index=False
    )
    owner = models.ForeignKey(KubeObject, on_delete=models.CASCADE, related_name="pods")
    workload = models.ForeignKey(
        Workload,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="pods",
        db_index=False,  # `pod_workload_ready_idx` leads with it
    )
    name = models.CharField(max_length=253)
    namespace = models.CharField(max_length=63)
    pod_set = models.CharField(max_length=63, default="main")
    replica_index = models.PositiveIntegerField(default=0)
    phase = models.CharField(max_length=20, choices=Phase.choices)
    scheduling = models.JSONField(
        default=dict, help_text="requests, node_selector, tolerations, required_node_affinity"
    )
    node = models.ForeignKey(Node, on_delete=reschedule, null=True, blank=True)
    created_at = models.DateTimeField()
    bound_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True, help_text="When it becomes ready")
    ready = models.BooleanField(default=False)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="unique_pod")
        ]
        indexes = [
            # Binding and readiness look for a cluster's pods by phase and whether they have a node.
            models.Index(fields=["cluster", "phase", "node"]),
            # Whether a workload has pods, and whether all are ready (every round asks it of
            # every admitted workload: runtime._due), from the index alone.
            models.Index(fields=["workload", "ready"], name="pod_workload_ready_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Checkpoint(models.Model):
    owner = models.ForeignKey(KubeObject, on_delete=models.CASCADE, related_name="checkpoints")
    workload = models.ForeignKey(Workload, on_delete=models.SET_NULL, null=True, blank=True)
    step = models.PositiveIntegerField()
    path = models.CharField(max_length=1024, blank=True)
    saved_at = models.DateTimeField()

    class Meta:
        ordering = ["owner", "step"]
        # workloads/checkpoints.py checks "after the latest" under a lock; this backs it.
        constraints = [
            models.UniqueConstraint(fields=["owner", "step"], name="unique_checkpoint_step")
        ]

    def __str__(self) -> str:
        return f"{self.owner.key}@{self.step}"


class Slice(models.Model):
    """A TPU slice the GKE slice controller forms for an admitted workload (seeds.md §B.4)."""

    class State(models.TextChoices):
        ACTIVATING = "ACTIVATING"
        ACTIVE = "ACTIVE"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="slices")
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="slices")
    name = models.CharField(max_length=49)
    topology = models.CharField(max_length=16, help_text="AxBxC, as in the Slice spec")
    partition_ids = models.JSONField(default=list)
    node_pools = models.JSONField(default=list, help_text="Sorted pool names of its hosts")
    hosts = models.JSONField(default=list)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVATING)
    created_at = models.DateTimeField()
    activates_at = models.DateTimeField()

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="unique_slice_name")
        ]

    def __str__(self) -> str:
        return self.name


class KubeWatch(models.Model):
    """Where the watch of one resource on a real cluster resumes after a disconnect."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    resource = models.CharField(
        max_length=128, help_text="plural.group, e.g. workloads.kueue.x-k8s.io"
    )
    resource_version = models.CharField(max_length=64, blank=True)
    leased_until = models.DateTimeField(
        null=True, blank=True, help_text="a worker is watching until then; expired: nobody is"
    )
    unreadable = models.JSONField(
        default=dict, help_text="Objects that failed to parse: key -> the error, shown to admins"
    )
    # The connection's health, shown on the cluster's page (workloads/kube/connection.py).
    last_event_at = models.DateTimeField(
        null=True, blank=True, help_text="when the last change (or list) was ingested"
    )
    lag_seconds = models.FloatField(
        null=True,
        blank=True,
        help_text="of the last change: from its write at the apiserver to its ingestion",
    )
    disconnected_at = models.DateTimeField(
        null=True, blank=True, help_text="the watch dropped or failed then; null once it is back"
    )
    errors = models.JSONField(
        default=list, blank=True, help_text="the last apiserver errors, newest last (bounded)"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "resource"], name="unique_kube_watch")
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.resource}@{self.resource_version}"


class KueueWorkloadLink(models.Model):
    """A Kueue Workload object on a real cluster, bound to the Workload row it stands for."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="kueue_links")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "uid"], name="unique_kueue_workload_uid")
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class WorkloadChange(models.Model):
    """A workload row inserted, deleted, or changed in a column admission reads: written by
    database triggers (migration 0011) for every writer, numbered in batches and read by the
    admission caches of every worker (workloads/admission_cache.py) to refresh only those rows."""

    # Plain integers, not foreign keys: a deleted workload's (or cluster's) change outlives it.
    cluster_id = models.BigIntegerField()
    workload_id = models.BigIntegerField(null=True)
    """None for a `parked_set`."""
    parked_release = models.BigIntegerField(null=True)
    """The new `Workload.parked_release` when an update changed nothing else admission reads
    (migration 0017): the cache parks it in memory without reading the row. Kueue moves
    inadmissible workloads back to their queues a second after a release of capacity, and the
    heads that still do not fit are parked again at the next run: most changes of a busy
    cluster are these."""
    parked_set = models.BigIntegerField(null=True)
    """A `ParkedSet`'s id: its workloads were parked again at the count `parked_release`,
    noted in this one change rather than one each."""
    batch = models.BigIntegerField(null=True)
    """The admission run that first read it (`WorkloadChangeLog.batch`); none yet: NULL."""

    class Meta:
        indexes = [models.Index(fields=["cluster_id", "batch"], name="workload_change_batch_idx")]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.workload_id}"


def _new_token() -> str:
    return uuid.uuid4().hex


class WorkloadChangeLog(models.Model):
    """A cluster's batches of workload changes. Each admission run, under the cluster's
    admission lock, takes the next batch number and gives it to every change no run has read
    yet; a worker's cache reads the batches it has not seen. Batches up to `pruned` are deleted:
    a cache that had not seen them reads the cluster in full."""

    cluster_id = models.BigIntegerField(primary_key=True)
    token = models.CharField(max_length=32, default=_new_token)
    """Made with the row: a cluster id used again (SQLite gives them back) has a new log,
    which no cache has read."""
    batch = models.BigIntegerField(default=0)
    pruned = models.BigIntegerField(default=0)
    releases = models.BigIntegerField(default=0)
    """How many admission runs requeued the parked workloads, a second after a release of
    capacity (`CapacityRelease`): a workload parked at a lower count is back in its queue
    (workloads/parking.py)."""

    def __str__(self) -> str:
        return f"{self.cluster_id}: batch {self.batch}, pruned through {self.pruned}"


class CapacityRelease(models.Model):
    """Capacity was released on a cluster (a workload finished, was evicted or deleted; a
    queue changed): inserted by the releasing transaction, consumed by the first admission run
    a requeue batch after the earliest one, which counts a release in
    `WorkloadChangeLog.releases` (workloads/parking.py). Inserted, never updated: a release
    takes no lock an admission run holds."""

    cluster_id = models.BigIntegerField()
    at = models.DateTimeField()
    """When it was released, on the clock of the cluster's admission runs (virtual in a
    replay): Kueue requeues a batch period after the first release it has not requeued."""

    class Meta:
        indexes = [models.Index(fields=["cluster_id", "at"], name="capacity_release_at_idx")]

    def __str__(self) -> str:
        return f"capacity released on cluster {self.cluster_id}"


class ParkedSet(models.Model):
    """Workloads an admission run parked again at a cluster's count of capacity releases, in one
    row (workloads/parking.py): a release requeues thousands and the next runs park most of
    them again, each already holding an older count of its own. Deleted once the count moves
    on, when they are back in their queues."""

    cluster_id = models.BigIntegerField()
    release = models.BigIntegerField()
    workloads = models.JSONField()
    """Their primary keys."""

    class Meta:
        indexes = [models.Index(fields=["cluster_id", "release"], name="parked_set_release_idx")]

    def __str__(self) -> str:
        parked = len(self.workloads)
        return f"{parked} parked at release {self.release} of cluster {self.cluster_id}"


class QueueGeneration(ClusterStamp):
    """Of the cluster's ResourceFlavors, Cohorts, ClusterQueues, LocalQueues, AdmissionChecks,
    Topologies and Configuration: what admission reads of its queues (triggers: migration
    0019; workloads.snapshot.queue_specs)."""
