"""`snapshot.load` is the only ORM -> scheduler translator and runs a fixed number of queries."""

from __future__ import annotations

import pytest

from tests.support import NAMESPACE, at, deployment, job
from workloads import services, snapshot
from workloads.models import Workload

# AdmissionChecks, ClusterQueues, Cohorts, ResourceFlavors, LocalQueues, Workloads (no TAS
# flavor, so no Topologies, Nodes or bound Pods).
SNAPSHOT_QUERIES = 6


@pytest.mark.parametrize("replicas", [2, 50])
def test_load_runs_the_same_number_of_queries_for_any_number_of_workloads(
    gpu_queues, django_assert_num_queries, replicas
):
    text = "---\n".join([deployment(replicas=replicas), job(pods=2)])
    services.apply(gpu_queues, text, source="w.yaml", now=at(), namespace=NAMESPACE)
    assert Workload.objects.count() == replicas + 1

    with django_assert_num_queries(SNAPSHOT_QUERIES):
        loaded = snapshot.load(gpu_queues)

    assert loaded.snapshot.workloads
    assert set(loaded.snapshot.cluster_queues) == {"gpu-queue"}
