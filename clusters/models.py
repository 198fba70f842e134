from __future__ import annotations

from django.db import models


class Cluster(models.Model):
    class Provider(models.TextChoices):
        SIM = "sim", "Simulated"
        GKE = "gke", "Google Kubernetes Engine"

    class Status(models.TextChoices):
        PROVISIONING = "PROVISIONING"
        RUNNING = "RUNNING"
        ERROR = "ERROR"
        DELETING = "DELETING"

    # A provider operation is under way: a worker drives it (clusters.services).
    IN_PROGRESS = (Status.PROVISIONING, Status.DELETING)

    class ReleaseChannel(models.TextChoices):
        RAPID = "RAPID"
        REGULAR = "REGULAR"
        STABLE = "STABLE"
        EXTENDED = "EXTENDED"

    name = models.SlugField(max_length=63, unique=True)
    provider = models.CharField(max_length=16, choices=Provider.choices, default=Provider.SIM)
    project = models.CharField(max_length=128, blank=True)
    location = models.CharField(max_length=64, default="us-central1")
    # GKE settings (the sim provider ignores them). Dynamic slicing needs Standard on RAPID.
    autopilot = models.BooleanField(default=False)
    release_channel = models.CharField(
        max_length=16,
        choices=ReleaseChannel.choices,
        default=ReleaseChannel.RAPID,
        blank=True,
        help_text="blank: an imported cluster on no release channel",
    )
    version = models.CharField(
        max_length=64, blank=True, help_text="initial GKE version; blank: the channel's default"
    )
    slice_controller = models.BooleanField(
        default=False, help_text="the TPU slice controller add-on (dynamic slicing)"
    )
    system_machine_type = models.CharField(
        max_length=64, default="e2-standard-4", help_text="default node pool of a Standard cluster"
    )
    system_node_count = models.PositiveIntegerField(default=1, help_text="per zone")
    # The Kubernetes API of a real cluster: an uploaded kubeconfig wins over endpoint + CA
    # (which GKE reports; the token then comes from the worker's Google credentials).
    endpoint = models.CharField(max_length=255, blank=True, help_text="host or https:// URL")
    ca_certificate = models.TextField(blank=True, help_text="base64 PEM, as GKE reports it")
    kubeconfig = models.TextField(blank=True, help_text="uploaded; may hold credentials")
    service_account_key = models.TextField(
        blank=True, help_text="uploaded, encrypted (clusters.credentials); never shown"
    )
    imported = models.BooleanField(
        default=False,
        help_text="recorded from GKE, not created by Accelplane: deleting it in Accelplane "
        "forgets it and leaves it in GKE unless the admin asks for its deletion there",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROVISIONING)
    status_message = models.TextField(blank=True)
    # GKE operation (or, for an adopted object, resource) names are long.
    operation_id = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def busy(self) -> bool:
        """An operation is under way; no other starts until it is done."""
        return self.status in self.IN_PROGRESS


class NodePool(models.Model):
    class Status(models.TextChoices):
        PROVISIONING = "PROVISIONING"
        RUNNING = "RUNNING"
        RESIZING = "RESIZING"
        ERROR = "ERROR"
        DELETING = "DELETING"

    # A provider operation is under way: a worker drives it (clusters.services).
    IN_PROGRESS = (Status.PROVISIONING, Status.RESIZING, Status.DELETING)

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="node_pools")
    name = models.SlugField(max_length=40)
    machine_type = models.CharField(max_length=64)
    node_count = models.PositiveIntegerField()
    tpu_topology = models.CharField(max_length=16, blank=True)
    block = models.CharField(max_length=64, blank=True)
    zone = models.CharField(max_length=64, blank=True, help_text="blank: the cluster's first zone")
    reservation = models.CharField(
        max_length=255,
        blank=True,
        help_text="the only reservation to use: projects/P/reservations/R[/reservationBlocks/B]",
    )
    workload_policy = models.CharField(
        max_length=64, blank=True, help_text="Compute workload policy placing a super-slicing pool"
    )
    # Accelerators: as GKE reports an imported pool, from the machine catalog for a created one.
    imported = models.BooleanField(
        default=False, help_text="recorded from GKE, not created by Accelplane (see Cluster)"
    )
    accelerator_type = models.CharField(
        max_length=64, blank=True, help_text="per node, e.g. nvidia-l4 or tpu-v5-lite-podslice"
    )
    accelerator_count = models.PositiveIntegerField(default=0, help_text="per node")
    min_node_count = models.PositiveIntegerField(
        null=True, blank=True, help_text="autoscaling's lower bound (per zone); null: off"
    )
    max_node_count = models.PositiveIntegerField(
        null=True, blank=True, help_text="autoscaling's upper bound (per zone); null: off"
    )
    placement_type = models.CharField(
        max_length=16, blank=True, help_text="GKE placementPolicy.type, e.g. COMPACT"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROVISIONING)
    status_message = models.TextField(blank=True)
    operation_id = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="unique_node_pool_name")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"

    @property
    def busy(self) -> bool:
        """An operation is under way; no other starts until it is done."""
        return self.status in self.IN_PROGRESS


class Node(models.Model):
    """A node as GKE creates it: labels, taints and allocatable from the machine catalog."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    node_pool = models.ForeignKey(NodePool, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    labels = models.JSONField(default=dict)
    taints = models.JSONField(default=list)
    allocatable = models.JSONField(default=dict, help_text="resource -> milli-units")
    capacity = models.JSONField(default=dict, help_text="resource -> milli-units")
    coordinates = models.JSONField(null=True, blank=True)
    ready = models.BooleanField(default=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="unique_node_name")]

    def __str__(self) -> str:
        return self.name


class ClusterStamp(models.Model):
    """A stamp per cluster that database triggers renew at every insert, update and delete of
    some of its rows, in the writer's transaction, whoever writes: a reader that keeps what it
    converted of them reads this one row, and the rows again only when it changed
    (workloads.snapshot._KeptWhileStamped). Each stamp is new, never a count: a rolled-back
    write's count would come back for other rows."""

    # A plain integer, not a foreign key: deleting a cluster deletes the stamped rows, which
    # stamps.
    cluster_id = models.BigIntegerField(primary_key=True)
    generation = models.BigIntegerField(default=0)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.generation}"


class NodeGeneration(ClusterStamp):
    """Of the cluster's nodes (triggers: migration 0007)."""
