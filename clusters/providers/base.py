"""The interface every provider (sim, gke) implements; our dataclasses in and out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from clusters.catalog import NodeTemplate


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    project: str
    location: str


@dataclass(frozen=True, slots=True)
class NodePoolSpec:
    cluster: ClusterSpec
    name: str
    machine_type: str
    node_count: int
    tpu_topology: str = ""
    block: str = ""


@dataclass(frozen=True, slots=True)
class Operation:
    id: str
    done: bool
    error: str = ""


class ProviderError(Exception):
    """A provider call failed; `permanent` failures are not retried."""

    def __init__(self, message: str, *, permanent: bool):
        super().__init__(message)
        self.message = message
        self.permanent = permanent


class Provider(Protocol):
    def create_cluster(self, spec: ClusterSpec) -> Operation:
        """Start creating a cluster; returns the long-running operation."""

    def create_node_pool(self, spec: NodePoolSpec) -> Operation:
        """Start creating a node pool; returns the long-running operation."""

    def get_operation(self, operation_id: str) -> Operation:
        """The operation's current state."""

    def list_nodes(self, spec: NodePoolSpec) -> list[NodeTemplate]:
        """The nodes of a created node pool, with their labels, taints and capacity."""
