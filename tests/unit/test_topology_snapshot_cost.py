"""What TAS flavors see of bound pods: counted per node and spec in the database, each pod
alike; pods of workloads with a topology assignment left to TAS."""

from __future__ import annotations

from clusters.models import Node
from tests.support import NAMESPACE, T0, at, job
from workloads import services, snapshot
from workloads.models import Pod, Workload

CPU = {"cpu": 500}


def pod(workload, name, node, requests, phase=Pod.Phase.RUNNING, **scheduling):
    return Pod.objects.create(
        cluster=workload.cluster,
        owner=workload.owner,
        workload=workload,
        name=name,
        namespace=NAMESPACE,
        phase=phase,
        scheduling={"requests": requests, **scheduling} if requests is not None else scheduling,
        node=node,
        created_at=T0,
    )


def workloads(cluster, *names):
    for name in names:
        services.apply(cluster, job(name), source=f"{name}.yaml", now=at(), namespace=NAMESPACE)
    return [Workload.objects.get(owner__name=name) for name in names]


def test_usage_sums_the_pods_holding_a_node_per_node(gpu_queues):
    first, second, third = Node.objects.filter(cluster=gpu_queues).order_by("name")
    tas, plain = workloads(gpu_queues, "tas", "plain")
    for i in range(3):
        pod(tas, f"tas-{i}", first, CPU)  # TAS accounts these from the assignment
    # Pinned to different hosts, so the specs differ, but the requests are alike.
    for i, node in enumerate((first, first, second)):
        pod(plain, f"plain-{i}", node, CPU, node_selector={"host": node.name})
    # Bound, not yet running; any `pods` request is one pod all the same.
    pod(plain, "pending", first, {"cpu": 250, "pods": 5000}, Pod.Phase.PENDING)
    pod(plain, "no-requests", second, None)
    pod(plain, "done", third, CPU, Pod.Phase.SUCCEEDED)  # holds no node
    pod(plain, "waiting", None, CPU, Pod.Phase.PENDING)

    usage = snapshot.non_tas_usage(gpu_queues, {tas.pk})

    assert usage == {
        first.name: {"cpu": 2 * 500 + 250, "pods": 3 * 1000},
        second.name: {"cpu": 500, "pods": 2 * 1000},
    }


def test_usage_counts_pods_without_a_workload(gpu_queues):
    node = Node.objects.filter(cluster=gpu_queues).order_by("name").first()
    (plain,) = workloads(gpu_queues, "plain")
    bare = pod(plain, "bare", node, CPU)
    Pod.objects.filter(pk=bare.pk).update(workload=None)

    assert snapshot.non_tas_usage(gpu_queues, {plain.pk}) == {node.name: {"cpu": 500, "pods": 1000}}
