"""The interface every provider (sim, gke) implements; our dataclasses in and out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from clusters import catalog
from clusters.catalog import NodeTemplate


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    project: str
    location: str
    # What GKE is asked for; the sim provider ignores these.
    autopilot: bool = False
    release_channel: str = "RAPID"
    version: str = ""
    slice_controller: bool = False
    system_machine_type: str = "e2-standard-4"
    system_node_count: int = 1


@dataclass(frozen=True, slots=True)
class NodePoolSpec:
    cluster: ClusterSpec
    name: str
    machine_type: str
    node_count: int
    tpu_topology: str = ""
    block: str = ""
    zone: str = ""
    reservation: str = ""
    workload_policy: str = ""

    @property
    def node_zone(self) -> str:
        """The pool's zone: its own, the cluster's if zonal, else the region's first zone."""
        if self.zone:
            return self.zone
        location = self.cluster.location
        return location if location.count("-") >= 2 else f"{location}-a"


@dataclass(frozen=True, slots=True)
class Operation:
    id: str
    done: bool
    error: str = ""


@dataclass(frozen=True, slots=True)
class ExistingNodePool:
    """A node pool as the provider reports it (to import it): what GKE says, not the catalog."""

    name: str
    machine_type: str
    node_count: int
    """Per zone, GKE's initialNodeCount."""
    zones: tuple[str, ...]
    status: str
    status_message: str = ""
    accelerator_type: str = ""
    accelerator_count: int = 0
    """Per node."""
    min_node_count: int | None = None
    max_node_count: int | None = None
    """Autoscaling's bounds per zone; None: autoscaling is off."""
    tpu_topology: str = ""
    placement_type: str = ""
    workload_policy: str = ""
    reservation: str = ""


@dataclass(frozen=True, slots=True)
class ExistingCluster:
    """A cluster as the provider reports it; endpoint and CA are what a kubeconfig needs."""

    name: str
    location: str
    status: str
    status_message: str
    version: str
    endpoint: str
    ca_certificate: str
    autopilot: bool = False
    release_channel: str = ""
    """blank: on no release channel"""
    slice_controller: bool = False
    node_pools: tuple[ExistingNodePool, ...] = ()


class ProviderError(Exception):
    """A provider call failed; `permanent` failures are not retried."""

    def __init__(self, message: str, *, permanent: bool):
        super().__init__(message)
        self.message = message
        self.permanent = permanent


@dataclass(frozen=True, slots=True)
class KubernetesAccess:
    endpoint: str
    """Host or URL of the API server; empty when there is none (simulated clusters)."""
    ca_certificate: str
    """Base64 PEM, as GKE reports it."""


class Provider(Protocol):
    def create_cluster(self, spec: ClusterSpec) -> Operation:
        """Start creating a cluster; returns the long-running operation."""

    def create_node_pool(self, spec: NodePoolSpec) -> Operation:
        """Start creating a node pool; returns the long-running operation."""

    def get_operation(self, operation_id: str) -> Operation:
        """The operation's current state; a failed one is done with `error` set."""

    def list_nodes(self, spec: NodePoolSpec) -> list[NodeTemplate]:
        """The nodes of a created node pool, with their labels, taints and capacity."""

    def kubernetes_access(self, spec: ClusterSpec) -> KubernetesAccess:
        """Where a created cluster's Kubernetes API answers, for the Kubernetes backend."""

    def delete_cluster(self, spec: ClusterSpec) -> Operation:
        """Start deleting a cluster and its node pools; one already gone is a done operation."""

    def set_node_pool_size(self, spec: NodePoolSpec, node_count: int) -> Operation:
        """Start resizing a node pool to `node_count` nodes (per zone)."""

    def delete_node_pool(self, spec: NodePoolSpec) -> Operation:
        """Start deleting a node pool; one already gone is a done operation."""

    def list_clusters(self, project: str, location: str) -> list[ExistingCluster]:
        """The clusters of a project and location, with their node pools (to import one)."""


def check_pool(spec: NodePoolSpec) -> None:
    """Refuse, for good, a pool shape GKE would refuse (the catalog names the field)."""
    try:
        catalog.validate_pool(spec.machine_type, spec.node_count, spec.tpu_topology or None)
    except catalog.CatalogError as error:
        raise ProviderError(str(error), permanent=True) from error


def catalog_nodes(spec: NodePoolSpec) -> list[NodeTemplate]:
    """The nodes GKE creates for this pool, as the machine catalog describes them."""
    return catalog.node_templates(
        cluster=spec.cluster.name,
        pool=spec.name,
        machine_type=spec.machine_type,
        nodes=spec.node_count,
        tpu_topology=spec.tpu_topology or None,
        block=spec.block or None,
        zone=spec.node_zone,
    )
