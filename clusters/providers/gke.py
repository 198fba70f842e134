"""Google Kubernetes Engine through google-cloud-container (REST transport).

Operation ids are full resource names, so any process can poll them:
`projects/P/locations/L/operations/OP` for an operation this provider started, or
`projects/P/locations/L/clusters/C[/nodePools/N]` when a retried create found the object
already there (its first operation id was lost), in which case the object's status is polled.

Nodes are not read from the cluster yet (that needs the Kubernetes API): `list_nodes` derives
them from the machine catalog, exactly like the sim provider.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import google.auth.exceptions
import requests
from google.api_core import exceptions as google_errors
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import container_v1
from google.oauth2 import service_account

from clusters import catalog
from clusters.catalog import NodeTemplate
from clusters.providers.base import (
    ClusterSpec,
    ExistingCluster,
    ExistingNodePool,
    KubernetesAccess,
    NodePoolSpec,
    Operation,
    ProviderError,
    catalog_nodes,
    check_pool,
)

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
DEFAULT_POOL = "default-pool"
# The key GKE documents for ReservationAffinity when it names one reservation (or block).
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
GKE_METADATA = container_v1.WorkloadMetadataConfig(
    mode=container_v1.WorkloadMetadataConfig.Mode.GKE_METADATA
)

_RESOURCE_NAME = re.compile(
    r"projects/[^/]+/locations/[^/]+/(operations/[^/]+|clusters/[^/]+(/nodePools/[^/]+)?)"
)
# Cluster and node pool statuses while an adopted object is still being created, and when
# it will never become usable; any other status (RUNNING, RECONCILING, ...) means it is up.
_PENDING = frozenset({"STATUS_UNSPECIFIED", "PROVISIONING"})
_FAILED = frozenset({"ERROR", "STOPPING"})
# GKE runs one operation at a time on a cluster and refuses others with FAILED_PRECONDITION.
_CLUSTER_BUSY = re.compile(r"incompatible operation|currently being", re.IGNORECASE)
_RETRYABLE_STATUSES = frozenset({"ABORTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED"})


def make_client(
    *, api_endpoint: str = "", credentials_info: Mapping[str, Any] | None = None
) -> container_v1.ClusterManagerClient:
    """A REST client: anonymous for a plain-http fake, else a key's or the ADC identity."""
    credentials: Credentials | None = None
    if api_endpoint.startswith("http://"):
        # A local fake: there is nobody to authenticate to.
        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    elif credentials_info:
        credentials = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
            credentials_info, scopes=SCOPES
        )
    options = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
    try:
        return container_v1.ClusterManagerClient(
            credentials=credentials, transport="rest", client_options=options
        )
    except google.auth.exceptions.DefaultCredentialsError as error:
        raise ProviderError(
            "no Google credentials: run `gcloud auth application-default login`, set "
            "GOOGLE_APPLICATION_CREDENTIALS, or set ACCELPLANE_GKE_CREDENTIALS_FILE",
            permanent=True,
        ) from error


class GkeProvider:
    def __init__(
        self, *, api_endpoint: str = "", credentials_info: Mapping[str, Any] | None = None
    ) -> None:
        self._client = make_client(api_endpoint=api_endpoint, credentials_info=credentials_info)

    # The Provider protocol.

    def create_cluster(self, spec: ClusterSpec) -> Operation:
        parent = location_path(spec)
        try:
            with _google_errors(f"cluster {spec.name}", spec.project):
                operation = self._client.create_cluster(
                    parent=parent, cluster=cluster_resource(spec)
                )
        except ResourceExists:
            # An earlier attempt created it and its operation id was lost: follow the cluster.
            return self.get_operation(cluster_path(spec))
        return _operation(parent, operation)

    def create_node_pool(self, spec: NodePoolSpec) -> Operation:
        check_pool(spec)
        if spec.cluster.autopilot:
            raise ProviderError(
                f"node pool {spec.name}: Autopilot cluster {spec.cluster.name} manages its own "
                "nodes; create TPU or GPU pools on a Standard cluster",
                permanent=True,
            )
        try:
            with _google_errors(_pool_subject(spec), spec.cluster.project):
                operation = self._client.create_node_pool(
                    parent=cluster_path(spec.cluster), node_pool=node_pool_resource(spec)
                )
        except ResourceExists:
            return self.get_operation(node_pool_path(spec))
        return _operation(location_path(spec.cluster), operation)

    def get_operation(self, operation_id: str) -> Operation:
        if not _RESOURCE_NAME.fullmatch(operation_id):
            raise ProviderError(f"{operation_id!r} is not a GKE operation", permanent=True)
        project = operation_id.split("/")[1]
        with _google_errors(operation_id, project):
            if "/operations/" in operation_id:
                operation = self._client.get_operation(name=operation_id)
                return _operation(operation_id.rsplit("/operations/", 1)[0], operation)
            if "/nodePools/" in operation_id:
                pool = self._client.get_node_pool(name=operation_id)
                return _object_operation(operation_id, pool.status.name, pool.status_message)
            cluster = self._client.get_cluster(name=operation_id)
            return _object_operation(operation_id, cluster.status.name, cluster.status_message)

    def list_nodes(self, spec: NodePoolSpec) -> list[NodeTemplate]:
        return catalog_nodes(spec)

    # Beyond the protocol: what the Kubernetes half of the gke provider and the UI will need.

    def get_cluster(self, spec: ClusterSpec) -> ExistingCluster:
        with _google_errors(f"cluster {spec.name}", spec.project):
            return _cluster_view(self._client.get_cluster(name=cluster_path(spec)))

    def kubernetes_access(self, spec: ClusterSpec) -> KubernetesAccess:
        cluster = self.get_cluster(spec)
        return KubernetesAccess(cluster.endpoint, cluster.ca_certificate)

    def list_clusters(self, project: str, location: str) -> list[ExistingCluster]:
        parent = location_path(ClusterSpec("", project, location))
        with _google_errors(f"clusters in {parent}", project):
            return [_cluster_view(c) for c in self._client.list_clusters(parent=parent).clusters]

    def delete_cluster(self, spec: ClusterSpec) -> Operation:
        try:
            with _google_errors(f"cluster {spec.name}", spec.project):
                operation = self._client.delete_cluster(name=cluster_path(spec))
        except ResourceMissing:
            return Operation(id=cluster_path(spec), done=True)  # gone already: a retried delete
        return _operation(location_path(spec), operation)

    def delete_node_pool(self, spec: NodePoolSpec) -> Operation:
        try:
            with _google_errors(_pool_subject(spec), spec.cluster.project):
                operation = self._client.delete_node_pool(name=node_pool_path(spec))
        except ResourceMissing:
            return Operation(id=node_pool_path(spec), done=True)
        return _operation(location_path(spec.cluster), operation)

    def set_node_pool_size(self, spec: NodePoolSpec, node_count: int) -> Operation:
        with _google_errors(_pool_subject(spec), spec.cluster.project):
            operation = self._client.set_node_pool_size(
                request=container_v1.SetNodePoolSizeRequest(
                    name=node_pool_path(spec), node_count=node_count
                )
            )
            return _operation(location_path(spec.cluster), operation)


# Resource names.


def location_path(spec: ClusterSpec) -> str:
    if not spec.project:
        raise ProviderError(
            f"cluster {spec.name or '?'}: a GKE cluster needs a Google Cloud project",
            permanent=True,
        )
    return f"projects/{spec.project}/locations/{spec.location}"


def cluster_path(spec: ClusterSpec) -> str:
    return f"{location_path(spec)}/clusters/{spec.name}"


def node_pool_path(spec: NodePoolSpec) -> str:
    return f"{cluster_path(spec.cluster)}/nodePools/{spec.name}"


def _pool_subject(spec: NodePoolSpec) -> str:
    return f"node pool {spec.name} of cluster {spec.cluster.name}"


# Requests: the gcloud flags of the three workflows, as google.container.v1 messages.


def cluster_resource(spec: ClusterSpec) -> container_v1.Cluster:
    channel = container_v1.ReleaseChannel(
        channel=container_v1.ReleaseChannel.Channel.__members__[spec.release_channel]
    )
    if spec.autopilot:
        if spec.slice_controller:
            raise ProviderError(
                f"cluster {spec.name}: the TPU slice controller needs a Standard cluster",
                permanent=True,
            )
        # Autopilot manages nodes, add-ons and Workload Identity by itself.
        return container_v1.Cluster(
            name=spec.name,
            autopilot=container_v1.Autopilot(enabled=True),
            release_channel=channel,
            initial_cluster_version=spec.version,
        )
    return container_v1.Cluster(
        name=spec.name,
        release_channel=channel,
        initial_cluster_version=spec.version,
        workload_identity_config=container_v1.WorkloadIdentityConfig(
            workload_pool=f"{spec.project}.svc.id.goog"
        ),
        ip_allocation_policy=container_v1.IPAllocationPolicy(use_ip_aliases=True),
        addons_config=container_v1.AddonsConfig(
            gcs_fuse_csi_driver_config=container_v1.GcsFuseCsiDriverConfig(enabled=True),
            slice_controller_config=(
                container_v1.SliceControllerConfig(enabled=True) if spec.slice_controller else None
            ),
        ),
        node_pools=[
            container_v1.NodePool(
                name=DEFAULT_POOL,
                initial_node_count=spec.system_node_count,
                config=container_v1.NodeConfig(
                    machine_type=spec.system_machine_type, workload_metadata_config=GKE_METADATA
                ),
            )
        ],
    )


def node_pool_resource(spec: NodePoolSpec) -> container_v1.NodePool:
    machine = catalog.get_machine_type(spec.machine_type)
    return container_v1.NodePool(
        name=spec.name,
        initial_node_count=spec.node_count,
        # One zone, so that node_count is the pool's size (in a regional cluster it is per zone).
        locations=[spec.node_zone],
        config=container_v1.NodeConfig(
            machine_type=spec.machine_type,
            accelerators=_gpus(machine),
            reservation_affinity=_reservation_affinity(spec.reservation),
            workload_metadata_config=GKE_METADATA,
        ),
        placement_policy=_placement_policy(spec),
    )


def _gpus(machine: catalog.MachineType) -> list[container_v1.AcceleratorConfig]:
    """GPUs with GKE-installed drivers (gcloud's gpu-driver-version=latest); TPUs need none."""
    if not machine.is_gpu:
        return []
    driver = container_v1.GPUDriverInstallationConfig(
        gpu_driver_version=container_v1.GPUDriverInstallationConfig.GPUDriverVersion.LATEST
    )
    return [
        container_v1.AcceleratorConfig(
            accelerator_type=machine.accelerator,
            accelerator_count=machine.accelerator_count,
            gpu_driver_installation_config=driver,
        )
    ]


def _reservation_affinity(reservation: str) -> container_v1.ReservationAffinity | None:
    if not reservation:
        return None
    return container_v1.ReservationAffinity(
        consume_reservation_type=container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION,
        key=RESERVATION_KEY,
        values=[reservation],
    )


def _placement_policy(spec: NodePoolSpec) -> container_v1.NodePool.PlacementPolicy | None:
    """A workload policy places super-slicing cubes; a multi-host TPU slice is placed COMPACT."""
    if spec.workload_policy:
        return container_v1.NodePool.PlacementPolicy(policy_name=spec.workload_policy)
    if catalog.hosts_per_slice(spec.machine_type, spec.tpu_topology or None) > 1:
        return container_v1.NodePool.PlacementPolicy(
            type_=container_v1.NodePool.PlacementPolicy.Type.COMPACT,
            tpu_topology=spec.tpu_topology,
        )
    return None


# Responses.


def _operation(location: str, operation: container_v1.Operation) -> Operation:
    return Operation(
        id=f"{location}/operations/{operation.name}",
        done=operation.status == container_v1.Operation.Status.DONE,
        error=operation.error.message,
    )


def _object_operation(name: str, status: str, message: str) -> Operation:
    if status in _FAILED:
        return Operation(id=name, done=True, error=message or f"{name} is {status}")
    return Operation(id=name, done=status not in _PENDING)


def _cluster_view(cluster: container_v1.Cluster) -> ExistingCluster:
    channel = cluster.release_channel.channel.name
    return ExistingCluster(
        name=cluster.name,
        location=cluster.location,
        status=cluster.status.name,
        status_message=cluster.status_message,
        version=cluster.current_master_version,
        endpoint=cluster.endpoint,
        ca_certificate=cluster.master_auth.cluster_ca_certificate,
        autopilot=cluster.autopilot.enabled,
        release_channel="" if channel == "UNSPECIFIED" else channel,
        slice_controller=cluster.addons_config.slice_controller_config.enabled,
        node_pools=tuple(_pool_view(pool) for pool in cluster.node_pools),
    )


def _pool_view(pool: container_v1.NodePool) -> ExistingNodePool:
    """GPUs as GKE reports them (config.accelerators); TPU hosts carry none there, so their
    chips come from the catalog when it knows the machine type."""
    accelerator, count = "", 0
    if pool.config.accelerators:
        accelerator = pool.config.accelerators[0].accelerator_type
        count = sum(
            a.accelerator_count
            for a in pool.config.accelerators
            if a.accelerator_type == accelerator
        )
    elif pool.config.machine_type in catalog.CATALOG:
        machine = catalog.CATALOG[pool.config.machine_type]
        accelerator, count = machine.accelerator or "", machine.accelerator_count
    autoscaling = pool.autoscaling
    placement = pool.placement_policy
    affinity = pool.config.reservation_affinity
    specific = affinity.consume_reservation_type.name == "SPECIFIC_RESERVATION"
    return ExistingNodePool(
        name=pool.name,
        machine_type=pool.config.machine_type,
        node_count=pool.initial_node_count,
        zones=tuple(pool.locations),
        status=pool.status.name,
        status_message=pool.status_message,
        accelerator_type=accelerator,
        accelerator_count=count,
        min_node_count=autoscaling.min_node_count if autoscaling.enabled else None,
        max_node_count=autoscaling.max_node_count if autoscaling.enabled else None,
        tpu_topology=placement.tpu_topology,
        placement_type="" if placement.type_.name == "TYPE_UNSPECIFIED" else placement.type_.name,
        workload_policy=placement.policy_name,
        reservation=affinity.values[0] if specific and affinity.values else "",
    )


# Errors.


class ResourceExists(ProviderError):
    """GKE says ALREADY_EXISTS: permanent unless the caller created it and can adopt it."""


class ResourceMissing(ProviderError):
    """GKE says NOT_FOUND."""


@contextmanager
def _google_errors(subject: str, project: str) -> Iterator[None]:
    """Turn what the Google client raises into a ProviderError about `subject`."""
    try:
        yield
    except google_errors.GoogleAPICallError as error:
        raise _provider_error(error, subject, project) from error
    except (requests.RequestException, google.auth.exceptions.TransportError) as error:
        raise ProviderError(f"{subject}: GKE API unreachable: {error}", permanent=False) from error
    except google.auth.exceptions.RefreshError as error:
        raise ProviderError(
            f"{subject}: Google credentials were refused: {error}", permanent=True
        ) from error


def _provider_error(
    error: google_errors.GoogleAPICallError, subject: str, project: str
) -> ProviderError:
    status, detail = _rpc_status(error), _google_message(error)
    if status == "ALREADY_EXISTS":
        return ResourceExists(f"{subject}: {detail}", permanent=True)
    if error.code == 404:
        return ResourceMissing(f"{subject}: {detail}", permanent=True)
    if error.code == 429 and error.reason == "RATE_LIMIT_EXCEEDED":
        return ProviderError(f"{subject}: GKE API rate limit, retrying: {detail}", permanent=False)
    if error.code == 429 or (error.code == 403 and "quota" in detail.lower()):
        # Quota stays exceeded until someone raises it or frees capacity: retrying cannot help.
        return ProviderError(
            f"{subject}: quota exceeded in project {project}: {detail} "
            "(raise the quota or free capacity, then create it again)",
            permanent=True,
        )
    if error.code == 401:
        return ProviderError(
            f"{subject}: Google credentials were refused: {detail}", permanent=True
        )
    if error.code == 403:
        return ProviderError(
            f"{subject}: permission denied in project {project}: {detail} "
            "(the credentials need roles/container.admin)",
            permanent=True,
        )
    if status == "FAILED_PRECONDITION" and _CLUSTER_BUSY.search(detail):
        return ProviderError(f"{subject}: the cluster is busy, retrying: {detail}", permanent=False)
    transient = status in _RETRYABLE_STATUSES or (error.code or 0) >= 500
    return ProviderError(f"{subject}: {detail}", permanent=not transient)


def _rpc_status(error: google_errors.GoogleAPICallError) -> str:
    """The canonical status (ALREADY_EXISTS, ABORTED, ...); over REST only the body has it."""
    try:
        return str(error.response.json()["error"]["status"])
    except (AttributeError, KeyError, TypeError, ValueError):
        code = error.grpc_status_code
        return code.name if code else ""


def _google_message(error: google_errors.GoogleAPICallError) -> str:
    """Google's message without the "POST https://...: " prefix the REST transport adds."""
    return re.sub(r"^[A-Z]+ \S+: ", "", str(error.message))
