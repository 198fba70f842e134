"""The embedded provider: GKE operations that finish after a delay, nodes from the catalog.

Operation ids carry their deadline, so any process (web, worker) can answer get_operation
without shared state.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from clusters.catalog import NodeTemplate
from clusters.providers.base import (
    ClusterSpec,
    ExistingCluster,
    KubernetesAccess,
    NodePoolSpec,
    Operation,
    ProviderError,
    catalog_nodes,
    check_pool,
)


class SimProvider:
    def __init__(self, operation_seconds: float = 3.0):
        self.operation_seconds = operation_seconds

    def _start(self, kind: str, name: str) -> Operation:
        # Rounded down: the id never promises a later end than the one polled for.
        deadline = math.floor((time.time() + self.operation_seconds) * 1000) / 1000
        return Operation(id=f"sim-{kind}-{name}-{deadline:.3f}", done=self.operation_seconds <= 0)

    def create_cluster(self, spec: ClusterSpec) -> Operation:
        return self._start("create-cluster", spec.name)

    def create_node_pool(self, spec: NodePoolSpec) -> Operation:
        check_pool(spec)
        return self._start("create-node-pool", spec.name)

    def get_operation(self, operation_id: str) -> Operation:
        try:
            deadline = float(operation_id.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            raise ProviderError(f"unknown operation {operation_id}", permanent=True) from None
        return Operation(id=operation_id, done=time.time() >= deadline)

    def list_nodes(self, spec: NodePoolSpec) -> list[NodeTemplate]:
        return catalog_nodes(spec)

    def kubernetes_access(self, spec: ClusterSpec) -> KubernetesAccess:
        return KubernetesAccess("", "")  # the simulator is the cluster

    def delete_cluster(self, spec: ClusterSpec) -> Operation:
        return self._start("delete-cluster", spec.name)

    def set_node_pool_size(self, spec: NodePoolSpec, node_count: int) -> Operation:
        check_pool(replace(spec, node_count=node_count))
        return self._start("resize-node-pool", spec.name)

    def delete_node_pool(self, spec: NodePoolSpec) -> Operation:
        return self._start("delete-node-pool", spec.name)

    def list_clusters(self, project: str, location: str) -> list[ExistingCluster]:
        return []  # a simulated project holds only the clusters Accelplane created
