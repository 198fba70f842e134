"""The simulated kube-scheduler's reads: node usage from bound pods, waiting pods as tuples."""

from __future__ import annotations

from datetime import timedelta

from clusters.models import Node
from tests.support import NAMESPACE, T0
from workloads import runtime
from workloads.models import KubeObject, Pod
from workloads.snapshot import cluster_nodes

CPU = {"cpu": 1000}
CPU_GPU = {"cpu": 500, "nvidia.com/gpu": 1000}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def owner(cluster, name, simulation, namespace=NAMESPACE):
    return KubeObject.objects.create(
        cluster=cluster,
        api_version="batch/v1",
        kind="Job",
        namespace=namespace,
        name=name,
        manifest={},
        simulation=simulation,
        created_at=T0,
        updated_at=T0,
    )


def pod(of, name, requests, node=None, phase=Pod.Phase.PENDING, **scheduling):
    scheduling.setdefault("tolerations", [GPU_TOLERATION])
    return Pod.objects.create(
        cluster=of.cluster,
        owner=of,
        name=name,
        namespace=of.namespace,
        phase=phase,
        scheduling={"requests": requests, **scheduling},
        node=node,
        created_at=T0,
    )


def test_node_usage_adds_up_the_requests_of_pods_holding_a_node(cluster):
    first, second, _ = Node.objects.filter(cluster=cluster).order_by("name")
    job = owner(cluster, "job", {})
    for i in range(3):
        pod(job, f"cpu-{i}", CPU, first, Pod.Phase.RUNNING)
    for i in range(2):
        pod(job, f"gpu-{i}", CPU_GPU, first)
    pod(job, "mem", {"memory": 2048}, second, Pod.Phase.RUNNING)
    pod(job, "done", CPU, first, Pod.Phase.SUCCEEDED)  # holds no node
    pod(job, "waiting", CPU)
    fleet = cluster_nodes(cluster.pk)

    used = runtime._node_usage(cluster, fleet.nodes, fleet.ids)

    assert used == {
        first.name: {"cpu": 4000, "nvidia.com/gpu": 2000, "pods": 5000},
        second.name: {"memory": 2048, "pods": 1000},
    }
    only_second = [n for n in fleet.nodes if n.name == second.name]
    assert runtime._node_usage(cluster, only_second, fleet.ids) == {
        second.name: {"memory": 2048, "pods": 1000}
    }


def test_waiting_pods_bind_and_start_after_their_owners_startup(cluster):
    quick, default = owner(cluster, "quick", {"startup": 5}), owner(cluster, "default", {})
    pod(quick, "quick-0", CPU)
    pod(default, "default-0", CPU)
    pod(default, "default-1", CPU_GPU)
    pod(default, "nowhere", CPU, node_selector={"pool": "none"})

    assert runtime._bind_pods(cluster, T0)

    pods = {p.name: p for p in Pod.objects.filter(cluster=cluster)}
    assert pods["nowhere"].node_id is None
    started = {name: p.ready_at - T0 for name, p in pods.items() if p.node_id is not None}
    assert started == {
        "quick-0": timedelta(seconds=5),
        "default-0": timedelta(seconds=30),
        "default-1": timedelta(seconds=30),
    }
    assert {p.bound_at for p in pods.values() if p.node_id is not None} == {T0}


def test_pods_alike_but_for_their_names_share_one_decoding():
    text = '{"requests": {"cpu": 1000}, "tolerations": [{"key": "k", "operator": "Exists"}]}'
    first, second = runtime._pods([("a", text), ("b", text)])
    assert (first.key, second.key) == ("a", "b")
    assert first.requests is second.requests
    assert first == runtime._pod(
        "a", {"requests": CPU, "tolerations": [{"key": "k", "operator": "Exists"}]}
    )


def test_pods_of_one_name_in_two_namespaces_each_bind_where_they_fit(cluster):
    """A LeaderWorkerSet's pods are named after it and their index alone: two teams' `lws-0`."""
    first, second, _ = Node.objects.filter(cluster=cluster).order_by("name")
    for namespace, node in (("team-a", first), ("team-b", second)):
        pinned = {"kubernetes.io/hostname": node.labels["kubernetes.io/hostname"]}
        pod(owner(cluster, "lws", {}, namespace), "lws-0", CPU, node_selector=pinned)

    assert runtime._bind_pods(cluster, T0)

    bound = dict(Pod.objects.filter(cluster=cluster).values_list("namespace", "node__name"))
    assert bound == {"team-a": first.name, "team-b": second.name}
