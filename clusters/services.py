"""Every state change of clusters and node pools goes through here."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from celery import Task
from django.core.validators import RegexValidator
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from clusters import catalog, credentials, live
from clusters.models import Cluster, Node, NodePool
from clusters.providers import Provider, ProviderError, get_provider
from clusters.providers.base import (
    ClusterSpec,
    ExistingCluster,
    ExistingNodePool,
    NodePoolSpec,
    Operation,
)
from events.audit import json_time, record_audit
from events.services import deferred_events, record_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)
_Row = TypeVar("_Row", Cluster, NodePool)

POLL_SECONDS = 1.0  # between looks at a running provider operation
RETRY_SECONDS = 30.0  # after the provider was unavailable or rate limited


class Busy(Exception):
    """The cluster or node pool is in the middle of another operation."""


@dataclass(frozen=True, slots=True)
class Progress:
    """What a reconcile step left to do: nothing, or poll again after `retry_after` s."""

    done: bool
    retry_after: float = 0.0


def _started(
    task: Task[Any, Any], pk: int, kind: str, cluster: str, key: str, message: str, **data: int
) -> None:
    """The event saying a provider operation started on object `key`, and the task that
    drives it, queued once the caller's transaction commits. Callers record their events
    within `deferred_events()`: the event log's lock is then the last one they take."""
    record_event(kind, at=timezone.now(), cluster=cluster, object_key=key, message=message, **data)
    transaction.on_commit(lambda: task.delay(pk))


# Uploaded with a cluster, sealed (clusters.credentials): Cluster fields of the same names.
CREDENTIAL_FIELDS = ("service_account_key", "kubeconfig")
# A project and a location are one segment of a GKE resource name (projects/P/locations/L):
# no slash, no dot segment, nothing the client would have to escape. Project ids, numbers and
# domain-scoped ids (example.com:my-project); regions and zones (us-central1, us-east5-a).
PROJECT_ID = RegexValidator(
    r"^[a-z0-9]([-a-z0-9.:]*[a-z0-9])?\Z",
    "%(value)r is not a Google Cloud project id (such as my-project)",
)
LOCATION = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z",
    "%(value)r is not a GKE region or zone (such as us-central1)",
)


def settings_problems(provider: str, project: str, credentials: Iterable[str]) -> dict[str, str]:
    """What is wrong with a cluster's settings, by field (the API and the form both ask): a
    gke cluster needs its project, and only a gke cluster takes `credentials` (a simulated one
    would silently ignore them)."""
    if provider == Cluster.Provider.GKE:
        return {} if project else {"project": "a gke cluster needs its project id"}
    message = f"only a gke cluster takes credentials (this one is {provider})"
    return dict.fromkeys(credentials, message)


def provider_for(cluster: Cluster) -> Provider:
    """The cluster's provider, acting with the cluster's uploaded key when it has one."""
    return provider_with(cluster.provider, cluster.service_account_key)


def provider_with(provider: str, sealed_key: str) -> Provider:
    """A provider acting with a sealed service account key; blank: the workers' identity."""
    try:
        key = credentials.unseal(sealed_key)
        # Checked again (its token_uri): a key stored before that rule, or around the API.
        key = credentials.service_account_key(key) if key else None
    except credentials.CredentialError as error:
        raise ProviderError(str(error), permanent=True) from None
    return get_provider(provider, key)


def _cluster_spec(cluster: Cluster) -> ClusterSpec:
    return ClusterSpec(
        cluster.name,
        cluster.project,
        cluster.location,
        autopilot=cluster.autopilot,
        release_channel=cluster.release_channel,
        version=cluster.version,
        slice_controller=cluster.slice_controller,
        system_machine_type=cluster.system_machine_type,
        system_node_count=cluster.system_node_count,
    )


def _pool_spec(pool: NodePool) -> NodePoolSpec:
    return NodePoolSpec(
        _cluster_spec(pool.cluster),
        pool.name,
        pool.machine_type,
        pool.node_count,
        pool.tpu_topology,
        pool.block,
        zone=pool.zone,
        reservation=pool.reservation,
        workload_policy=pool.workload_policy,
    )


def create_cluster(
    *,
    name: str,
    provider: str = "sim",
    project: str = "",
    location: str = "us-central1",
    actor: User | None = None,
    **gke_settings: bool | int | str,
) -> Cluster:
    """Record the cluster; a task (enqueued on commit) creates it at the provider.

    `gke_settings` are Cluster fields only GKE reads: autopilot, release_channel, version,
    slice_controller, system_machine_type, system_node_count.
    """
    from clusters import tasks

    with transaction.atomic(), deferred_events():
        cluster = Cluster.objects.create(
            name=name, provider=provider, project=project, location=location, **gke_settings
        )
        message = f"creating cluster {name} ({provider})"
        key = f"Cluster/{name}"
        _started(tasks.reconcile_cluster, cluster.pk, "cluster.creating", name, key, message)
        record_audit(actor, "created", key, cluster=name, after=audited_cluster(cluster))
    return cluster


def create_node_pool(
    cluster: Cluster,
    *,
    name: str,
    machine_type: str,
    node_count: int,
    tpu_topology: str = "",
    block: str = "",
    actor: User | None = None,
    **gke_settings: str,
) -> NodePool:
    """Validate against the catalog, record the pool, and provision it in a task.

    `gke_settings` are NodePool fields only GKE reads: zone, reservation, workload_policy.
    """
    from clusters import tasks

    with transaction.atomic(), deferred_events():
        pool = _new_pool(
            cluster, name, machine_type, node_count, tpu_topology, block, **gke_settings
        )
        message = f"creating node pool {name}: {node_count} x {machine_type}"
        key = f"NodePool/{cluster.name}/{name}"
        kind = "node_pool.creating"
        _started(tasks.reconcile_node_pool, pool.pk, kind, cluster.name, key, message)
        record_audit(actor, "created", key, cluster=cluster.name, after=audited_pool(pool))
    return pool


class ImportRefused(Exception):
    """The cluster cannot be imported; `field` is the input that says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


# GKE statuses of a cluster or pool that is usable as it is; others are still being created,
# being deleted or failed.
_USABLE = frozenset({"RUNNING", "RUNNING_WITH_ERROR", "RECONCILING", "DEGRADED"})


def importable_clusters(project: str, location: str, sealed_key: str = "") -> list[ExistingCluster]:
    """The GKE clusters of `project` and `location`, as the key (else the workers' identity)
    sees them; ImportRefused naming `project` when GKE refuses or cannot be reached."""
    if not project:
        raise ImportRefused("project", "a gke cluster needs its project id")
    try:
        return provider_with(Cluster.Provider.GKE, sealed_key).list_clusters(project, location)
    except ProviderError as error:
        raise ImportRefused("project", error.message) from None


def import_cluster(
    *,
    name: str,
    project: str,
    location: str,
    service_account_key: str = "",
    kubeconfig: str = "",
    actor: User | None = None,
) -> Cluster:
    """Record GKE cluster `name` of `project`/`location` and its node pools as GKE reports
    them; nothing is created in GKE. Credentials come sealed (`CREDENTIAL_FIELDS`). Refused
    (ImportRefused) unless the cluster is in GKE's listing and it and its pools are usable."""
    listed = importable_clusters(project, location, service_account_key)
    found = next((c for c in listed if c.name == name), None)
    if found is None:
        names = ", ".join(sorted(c.name for c in listed)) or "none"
        raise ImportRefused(
            "name", f"project {project} has no GKE cluster {name!r} in {location} (it has: {names})"
        )
    waiting = [f"cluster {name} is {found.status}"] if found.status not in _USABLE else []
    waiting += [
        f"node pool {p.name} is {p.status}"
        for p in found.node_pools
        if p.status not in _USABLE and p.status != "ERROR"
    ]
    if waiting:
        raise ImportRefused(
            "name", f"{'; '.join(waiting)} in GKE: import it once GKE is done with it"
        )
    # Deferred: the pools' rows are written after the cluster's audit event.
    with transaction.atomic(), deferred_events():
        cluster = Cluster.objects.create(
            name=name,
            provider=Cluster.Provider.GKE,
            project=project,
            location=location,
            imported=True,
            autopilot=found.autopilot,
            release_channel=found.release_channel,
            version=found.version,
            slice_controller=found.slice_controller,
            endpoint=found.endpoint,
            ca_certificate=found.ca_certificate,
            service_account_key=service_account_key,
            kubeconfig=kubeconfig,
            status=Cluster.Status.RUNNING,
            status_message=found.status_message,
        )
        key = f"Cluster/{name}"
        record_audit(actor, "created", key, cluster=name, after=audited_cluster(cluster))
        for existing in found.node_pools:
            pool = _imported_pool(cluster, existing)
            pool_key = f"NodePool/{name}/{pool.name}"
            record_audit(actor, "created", pool_key, cluster=name, after=audited_pool(pool))
        record_event(
            "cluster.imported",
            at=timezone.now(),
            cluster=name,
            object_key=key,
            message=f"cluster {name} imported from GKE with {len(found.node_pools)} node pools",
            node_pools=len(found.node_pools),
        )
    return cluster


def _imported_pool(cluster: Cluster, existing: ExistingNodePool) -> NodePool:
    """The pool's row; its nodes come from the cluster's Node watch (workloads/kube)."""
    usable = existing.status in _USABLE
    return NodePool.objects.create(
        cluster=cluster,
        name=existing.name,
        machine_type=existing.machine_type,
        node_count=existing.node_count,
        # A pool spanning zones has node_count nodes in each; no single zone is its own.
        zone=existing.zones[0] if len(existing.zones) == 1 else "",
        tpu_topology=existing.tpu_topology,
        reservation=existing.reservation,
        workload_policy=existing.workload_policy,
        imported=True,
        accelerator_type=existing.accelerator_type,
        accelerator_count=existing.accelerator_count,
        min_node_count=existing.min_node_count,
        max_node_count=existing.max_node_count,
        placement_type=existing.placement_type,
        status=NodePool.Status.RUNNING if usable else NodePool.Status.ERROR,
        status_message=existing.status_message
        or ("" if usable else f"GKE reports {existing.status}"),
    )


def _new_pool(
    cluster: Cluster,
    name: str,
    machine_type: str,
    node_count: int,
    tpu_topology: str,
    block: str,
    operation_id: str = "",
    **gke_settings: str,
) -> NodePool:
    """A pool row, once the catalog accepts its shape (CatalogError names the field)."""
    catalog.validate_pool(machine_type, node_count, tpu_topology or None)
    machine = catalog.get_machine_type(machine_type)
    return NodePool.objects.create(
        cluster=cluster,
        name=name,
        machine_type=machine_type,
        node_count=node_count,
        tpu_topology=tpu_topology,
        block=block,
        accelerator_type=machine.accelerator or "",
        accelerator_count=machine.accelerator_count,
        operation_id=operation_id,
        **gke_settings,
    )


def provisioning_cluster_ids() -> list[int]:
    """Clusters with a provider operation under way: created or deleted."""
    clusters = Cluster.objects.filter(status__in=Cluster.IN_PROGRESS)
    return list(clusters.values_list("pk", flat=True))


def provisioning_node_pool_ids() -> list[int]:
    """Pools with a provider operation under way: created, resized or deleted."""
    pools = NodePool.objects.filter(status__in=NodePool.IN_PROGRESS)
    return list(pools.values_list("pk", flat=True))


def resize_node_pool(pool: NodePool, node_count: int, *, actor: User | None = None) -> NodePool:
    """Check the new size against the catalog, record it, and resize in a task."""
    catalog.validate_pool(pool.machine_type, node_count, pool.tpu_topology or None)
    before = pool.node_count
    return _start_pool_operation(
        pool,
        NodePool.Status.RESIZING,
        f"resizing node pool {pool.name}: {before} -> {node_count} nodes",
        actor,
        node_count=node_count,
    )


def delete_node_pool(pool: NodePool, *, actor: User | None = None) -> NodePool:
    """Record the deletion and delete at the provider in a task; the row goes when it is done."""
    message = f"deleting node pool {pool.name}"
    return _start_pool_operation(pool, NodePool.Status.DELETING, message, actor)


def _start_pool_operation(
    pool: NodePool, status: str, message: str, actor: User | None, **changes: int
) -> NodePool:
    from clusters import tasks

    with transaction.atomic(), deferred_events():
        locked = _begin(NodePool.objects.select_related("cluster"), pool.pk, status, **changes)
        before = audited_pool(locked)
        kind = f"node_pool.{status.lower()}"
        key = f"NodePool/{locked.cluster.name}/{locked.name}"
        cluster = locked.cluster.name
        _started(tasks.reconcile_node_pool, pool.pk, kind, cluster, key, message, **changes)
        locked.refresh_from_db()
        action = "deleted" if status == NodePool.Status.DELETING else "configured"
        after = audited_pool(locked)
        record_audit(actor, action, key, cluster=cluster, before=before, after=after)
    return locked


def delete_cluster(cluster: Cluster, *, actor: User | None = None) -> Cluster:
    """Record the deletion and delete at the provider in a task; when it is done the cluster's
    row goes, and with it everything Accelplane kept of it (the event log stays)."""
    from clusters import tasks

    with transaction.atomic(), deferred_events():
        locked = _begin(Cluster.objects.all(), cluster.pk, Cluster.Status.DELETING)
        before = audited_cluster(locked)
        message = f"deleting cluster {locked.name}"
        key = f"Cluster/{locked.name}"
        _started(tasks.reconcile_cluster, cluster.pk, "cluster.deleting", locked.name, key, message)
        record_audit(actor, "deleted", key, cluster=locked.name, before=before)
    locked.refresh_from_db()
    return locked


def forgets(row: Cluster | NodePool, delete_in_gke: bool) -> bool:
    """Deleting an imported cluster or pool only forgets it, unless the admin asks for its
    deletion in GKE; what Accelplane created it deletes at the provider."""
    return row.imported and not delete_in_gke


def forget_cluster(cluster: Cluster, *, actor: User | None = None) -> None:
    """Forget an imported cluster at once, and everything Accelplane kept of it but the event
    log; GKE is not called: the cluster stays there as it is."""
    key = f"Cluster/{cluster.name}"
    with transaction.atomic(), deferred_events():
        before = audited_cluster(_locked_idle(Cluster.objects.all(), cluster.pk))
        Cluster.objects.filter(pk=cluster.pk).delete()
        _forgotten("cluster", cluster.name, key, actor, before)


def forget_node_pool(pool: NodePool, *, actor: User | None = None) -> None:
    """Forget an imported pool and its nodes' rows; it stays in GKE as it is."""
    key = f"NodePool/{pool.cluster.name}/{pool.name}"
    with transaction.atomic(), deferred_events():
        before = audited_pool(_locked_idle(NodePool.objects.select_related("cluster"), pool.pk))
        NodePool.objects.filter(pk=pool.pk).delete()
        _forgotten("node_pool", pool.cluster.name, key, actor, before)


def _locked_idle(rows: QuerySet[_Row], pk: int) -> _Row:
    locked = rows.select_for_update().get(pk=pk)
    if locked.busy:
        what = f"{locked._meta.verbose_name} {locked.name}"
        raise Busy(f"{what} is {locked.status}: wait until it is RUNNING or ERROR")
    return locked


def _forgotten(
    kind: str, cluster: str, key: str, actor: User | None, before: dict[str, Any]
) -> None:
    what = f"{kind.replace('_', ' ')} {before['name']}"
    message = f"{what} is forgotten; it is still in GKE"
    record_event(
        f"{kind}.forgotten", at=timezone.now(), cluster=cluster, object_key=key, message=message
    )
    record_audit(actor, "deleted", key, cluster=cluster, before=before)


def replace_credentials(
    cluster: Cluster, sealed: Mapping[str, str], *, actor: User | None = None
) -> Cluster:
    """Store newly uploaded credentials (`CREDENTIAL_FIELDS`, sealed already); the audit
    event says which the cluster holds before and after, never what they hold."""
    with transaction.atomic():
        locked = Cluster.objects.select_for_update().get(pk=cluster.pk)
        before = credentials_held(locked)
        for field in CREDENTIAL_FIELDS:
            if field in sealed:
                setattr(locked, field, sealed[field])
        locked.save(update_fields=[f for f in CREDENTIAL_FIELDS if f in sealed])
        key = f"Cluster/{locked.name}"
        after = credentials_held(locked)
        record_audit(actor, "configured", key, cluster=locked.name, before=before, after=after)
    return locked


def credentials_held(cluster: Cluster) -> dict[str, bool]:
    """Which uploaded credentials the cluster holds (never their contents)."""
    return {field: bool(getattr(cluster, field)) for field in CREDENTIAL_FIELDS}


def audited_cluster(cluster: Cluster) -> dict[str, Any]:
    """A cluster as its audit events show it: settings, status and which credentials it holds,
    as the API shows them; not its node pools (they have events of their own)."""
    return {
        "id": cluster.pk,
        "name": cluster.name,
        "provider": cluster.provider,
        "project": cluster.project,
        "location": cluster.location,
        "autopilot": cluster.autopilot,
        "release_channel": cluster.release_channel,
        "version": cluster.version,
        "slice_controller": cluster.slice_controller,
        "system_machine_type": cluster.system_machine_type,
        "system_node_count": cluster.system_node_count,
        "imported": cluster.imported,
        "status": cluster.status,
        "status_message": cluster.status_message,
        "created_at": json_time(cluster.created_at),
        "credentials": credentials_held(cluster),
    }


def audited_pool(pool: NodePool) -> dict[str, Any]:
    """A node pool as the API and its audit events show it."""
    return {
        "id": pool.pk,
        "cluster": pool.cluster.name,
        "name": pool.name,
        "machine_type": pool.machine_type,
        "node_count": pool.node_count,
        "tpu_topology": pool.tpu_topology,
        "block": pool.block,
        "zone": pool.zone,
        "reservation": pool.reservation,
        "workload_policy": pool.workload_policy,
        "imported": pool.imported,
        "accelerator_type": pool.accelerator_type,
        "accelerator_count": pool.accelerator_count,
        "min_node_count": pool.min_node_count,
        "max_node_count": pool.max_node_count,
        "placement_type": pool.placement_type,
        "status": pool.status,
        "status_message": pool.status_message,
        "created_at": json_time(pool.created_at),
        "nodes": pool.nodes.count(),
    }


def _begin(rows: QuerySet[_Row], pk: int, status: str, **changes: int) -> _Row:
    """Lock the row and move it to `status` for a new provider operation, unless one is
    already under way (Busy). The last operation's stored id is cleared: it must not be
    polled for this one."""
    locked = _locked_idle(rows, pk)
    rows.filter(pk=pk).update(status=status, status_message="", operation_id="", **changes)
    return locked


def reconcile_cluster(cluster_id: int) -> Progress:
    """Advance a cluster being created or deleted; safe to call any number of times."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None or not cluster.busy:
        return Progress(done=True)
    key = f"Cluster/{cluster.name}"
    failure = _Failure(Cluster, cluster.pk, "cluster", cluster.name, key, cluster.status)
    deleting = cluster.status == Cluster.Status.DELETING
    try:
        provider = provider_for(cluster)
        if not cluster.operation_id:
            spec = _cluster_spec(cluster)
            start = provider.delete_cluster if deleting else provider.create_cluster
            operation = start(spec)
            # Stored before waiting: a retried task resumes this operation, never starts another.
            Cluster.objects.filter(pk=cluster.pk, operation_id="").update(operation_id=operation.id)
            cluster.refresh_from_db()
        operation = provider.get_operation(cluster.operation_id)
    except ProviderError as error:
        return failure.provider_error(error)
    if operation.error:
        return failure.fail(f"cluster {cluster.name}: {operation.error}")
    if not operation.done:
        return Progress(done=False, retry_after=POLL_SECONDS)
    if deleting:
        with transaction.atomic():
            if Cluster.objects.filter(pk=cluster.pk, status=Cluster.Status.DELETING).delete()[0]:
                record_event(
                    "cluster.deleted",
                    at=timezone.now(),
                    cluster=cluster.name,
                    object_key=key,
                    message=f"cluster {cluster.name} is deleted",
                )
        return Progress(done=True)
    try:
        access = provider.kubernetes_access(_cluster_spec(cluster))
    except ProviderError as error:
        return failure.provider_error(error)
    with transaction.atomic():
        if Cluster.objects.filter(pk=cluster.pk, status=Cluster.Status.PROVISIONING).update(
            status=Cluster.Status.RUNNING,
            status_message="",
            endpoint=access.endpoint,
            ca_certificate=access.ca_certificate,
        ):
            record_event(
                "cluster.created",
                at=timezone.now(),
                cluster=cluster.name,
                object_key=key,
                message=f"cluster {cluster.name} is running",
            )
    return Progress(done=True)


@dataclass(frozen=True, slots=True)
class _Failure:
    """How a cluster or node pool being provisioned reports what went wrong."""

    model: type[Cluster] | type[NodePool]
    pk: int
    kind: str  # event kind prefix: "cluster" or "node_pool"
    cluster: str
    key: str
    status: str = "PROVISIONING"
    """The status of the operation that failed."""

    def provider_error(self, error: ProviderError) -> Progress:
        if error.permanent:
            return self.fail(error.message)
        # GKE unavailable or rate limited: say so on the row and try again later.
        logger.warning("%s: %s", self.key, error.message)
        self.model.objects.filter(pk=self.pk).update(status_message=f"retrying: {error.message}")
        return Progress(done=False, retry_after=RETRY_SECONDS)

    def fail(self, message: str) -> Progress:
        """The provider refused for good: the row says why, and so does an event."""
        with transaction.atomic():
            running = self.model.objects.filter(pk=self.pk, status=self.status)
            if not running.update(status="ERROR", status_message=message):
                return Progress(done=True)  # another worker got here first
            record_event(
                f"{self.kind}.failed",
                at=timezone.now(),
                cluster=self.cluster,
                object_key=self.key,
                message=message,
            )
        return Progress(done=True)


def reconcile_node_pool(pool_id: int) -> Progress:
    """Advance a node pool's operation (create, resize or delete); safe to call any number of
    times. Nodes follow the pool when the operation is done."""
    pool = NodePool.objects.select_related("cluster").filter(pk=pool_id).first()
    if pool is None or not pool.busy:
        return Progress(done=True)
    key = f"NodePool/{pool.cluster.name}/{pool.name}"
    failure = _Failure(NodePool, pool.pk, "node_pool", pool.cluster.name, key, pool.status)
    if pool.cluster.status == Cluster.Status.PROVISIONING:
        # GKE refuses node pools on a cluster it is still creating.
        return Progress(done=False, retry_after=POLL_SECONDS)
    if pool.cluster.status == Cluster.Status.ERROR:
        return failure.fail(f"node pool {pool.name}: cluster {pool.cluster.name} failed")
    try:
        provider = provider_for(pool.cluster)
        if not pool.operation_id:
            operation = _start_operation(provider, pool)
            NodePool.objects.filter(pk=pool.pk, operation_id="").update(operation_id=operation.id)
            pool.refresh_from_db()
        operation = provider.get_operation(pool.operation_id)
        if operation.error:
            return failure.fail(f"node pool {pool.name}: {operation.error}")
        if not operation.done:
            return Progress(done=False, retry_after=POLL_SECONDS)
        deleting = pool.status == NodePool.Status.DELETING
        templates = [] if deleting else provider.list_nodes(_pool_spec(pool))
    except ProviderError as error:
        return failure.provider_error(error)
    if pool.status == NodePool.Status.PROVISIONING:
        _create_nodes(pool, templates)
    else:
        _finish_pool_operation(pool, templates)
    return Progress(done=True)


def _start_operation(provider: Provider, pool: NodePool) -> Operation:
    spec = _pool_spec(pool)
    if pool.status == NodePool.Status.RESIZING:
        return provider.set_node_pool_size(spec, pool.node_count)
    if pool.status == NodePool.Status.DELETING:
        return provider.delete_node_pool(spec)
    return provider.create_node_pool(spec)


def _finish_pool_operation(pool: NodePool, templates: list[catalog.NodeTemplate]) -> None:
    """A resize leaves the pool with the templates' nodes; a delete removes it. Pods on the
    nodes that go are pending again (Pod.node's on_delete), as Kubernetes reschedules them."""
    # Not deferred: report_nodes reads the nodes and the last `node.changed` under the event
    # log's lock that the event before it takes, so concurrent reports on one cluster never
    # miss each other's nodes; and nothing after that lock waits on another.
    with transaction.atomic():
        if not NodePool.objects.filter(pk=pool.pk, status=pool.status).exists():
            return  # another worker finished it
        gone = Node.objects.filter(node_pool=pool).exclude(name__in={t.name for t in templates})
        key = f"NodePool/{pool.cluster.name}/{pool.name}"
        if pool.status == NodePool.Status.DELETING:
            NodePool.objects.filter(pk=pool.pk).delete()
            kind, message = "node_pool.deleted", f"node pool {pool.name} is deleted"
        else:
            gone.delete()
            have = set(Node.objects.filter(node_pool=pool).values_list("name", flat=True))
            Node.objects.bulk_create(_node_rows(pool, [t for t in templates if t.name not in have]))
            NodePool.objects.filter(pk=pool.pk).update(status=NodePool.Status.RUNNING)
            kind = "node_pool.resized"
            message = f"node pool {pool.name} is running with {len(templates)} nodes"
        record_event(
            kind,
            at=timezone.now(),
            cluster=pool.cluster.name,
            object_key=key,
            message=message,
            nodes=len(templates),
        )
        live.report_nodes(pool.cluster, timezone.now())


def _create_nodes(
    pool: NodePool, templates: list[catalog.NodeTemplate], at: datetime | None = None
) -> None:
    # Not deferred, as in _finish_pool_operation: report_nodes reads under the event lock.
    with transaction.atomic():
        if not NodePool.objects.filter(pk=pool.pk, status=NodePool.Status.PROVISIONING).update(
            status=NodePool.Status.RUNNING, status_message=""
        ):
            return  # another worker finished it
        Node.objects.bulk_create(_node_rows(pool, templates))
        record_event(
            "node_pool.created",
            at=at or timezone.now(),
            cluster=pool.cluster.name,
            object_key=f"NodePool/{pool.cluster.name}/{pool.name}",
            message=f"node pool {pool.name} is running with {len(templates)} nodes",
            nodes=len(templates),
        )
        live.report_nodes(pool.cluster, at or timezone.now())


def _node_rows(pool: NodePool, templates: list[catalog.NodeTemplate]) -> list[Node]:
    return [
        Node(
            cluster=pool.cluster,
            node_pool=pool,
            name=t.name,
            labels=t.labels,
            taints=[{"key": x.key, "value": x.value, "effect": x.effect} for x in t.taints],
            allocatable=t.allocatable,
            capacity=t.capacity,
            coordinates=list(t.coordinates) if t.coordinates else None,
        )
        for t in templates
    ]


def provision_now(
    cluster: Cluster,
    *,
    name: str,
    machine_type: str,
    node_count: int,
    tpu_topology: str = "",
    block: str = "",
    at: datetime | None = None,
) -> NodePool:
    """Create a node pool and its nodes at once (scenarios and demo data, sim provider)."""
    pool = _new_pool(
        cluster, name, machine_type, node_count, tpu_topology, block, operation_id="immediate"
    )
    templates = get_provider(Cluster.Provider.SIM).list_nodes(_pool_spec(pool))
    _create_nodes(pool, templates, at)
    return pool
