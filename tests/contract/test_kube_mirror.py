"""A real cluster's Nodes and Pods mirrored into rows by their watches: the allocation the
pages show, and what explain and what-if see, follow the cluster."""

from __future__ import annotations

from typing import Any

import pytest

from clusters.models import Cluster, Node, NodePool
from tests.contract.conftest import gpu_cluster_on
from tests.support import NAMESPACE
from web.panels import accelerator_totals
from workloads.kube import watch
from workloads.models import Pod, Workload

GPU_POOL = "gpu-pool"


@pytest.fixture
def cluster(db, fake_kube):
    cluster = gpu_cluster_on(fake_kube)
    pool = NodePool.objects.create(
        cluster=cluster, name=GPU_POOL, machine_type="g2-standard-24", node_count=2
    )
    # What the machine catalog predicted before the nodes registered.
    Node.objects.create(cluster=cluster, node_pool=pool, name="predicted-0", allocatable={})
    return cluster


def session(cluster: Cluster, api, watched: watch.Watched) -> watch.Session:
    return watch.watch_resource(cluster, api, watched, timeout_seconds=1)


def node(name: str, pool: str = GPU_POOL, *, ready: bool = True, **spec: Any) -> dict[str, Any]:
    gpus = {"nvidia.com/gpu": "2"} if pool == GPU_POOL else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"cloud.google.com/gke-nodepool": pool, "kubernetes.io/hostname": name},
        },
        "spec": spec,
        "status": {
            "capacity": {"cpu": "24", "memory": "96Gi", **gpus},
            "allocatable": {"cpu": "23890m", "memory": "88221196Ki", **gpus},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str, *, labels=None, owners=(), node_name="", phase="Running", gated=False
) -> dict[str, Any]:
    container = {
        "name": "c",
        "image": "trainer",
        "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "1"}},
    }
    spec: dict[str, Any] = {"containers": [container]}
    if node_name:
        spec["nodeName"] = node_name
    if gated:
        spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    running = phase == "Running"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": labels or {},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": kind,
                    "name": owner,
                    "uid": f"uid-{owner}",
                    "controller": True,
                }
                for kind, owner in owners
            ],
            "creationTimestamp": "2026-12-04T01:00:00Z",
        },
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True" if node_name else "False"},
                {"type": "Ready", "status": "True" if running else "False"},
            ],
        },
    }


def trainer(index: int, **kwargs: Any) -> dict[str, Any]:
    labels = {"batch.kubernetes.io/job-name": "finetune"}
    return pod(f"finetune-{index}-x7k2p", labels=labels, **kwargs)


def gpus(cluster: Cluster) -> tuple[int, int]:
    (row,) = accelerator_totals(cluster)
    return row["total"], row["used"]


def test_registered_nodes_replace_the_catalogs_and_follow_their_state(cluster, api, fake_kube):
    fake_kube.put(node("gke-llm-gpu-pool-1a2b-0"))
    fake_kube.put(node("gke-llm-default-pool-9z8y-0", pool="default-pool"))

    session(cluster, api, watch.NODES)

    (registered,) = Node.objects.filter(cluster=cluster)
    # The prediction went; default-pool is not Accelplane's.
    assert registered.name == "gke-llm-gpu-pool-1a2b-0"
    assert registered.allocatable["nvidia.com/gpu"] == 2000
    assert registered.allocatable["cpu"] == 23890
    assert registered.ready
    assert gpus(cluster) == (2, 0)

    fake_kube.put(node("gke-llm-gpu-pool-1a2b-0", unschedulable=True))  # cordoned
    fake_kube.put(node("gke-llm-gpu-pool-1a2b-1", ready=False, taints=[TAINT]))
    session(cluster, api, watch.NODES)
    assert dict(Node.objects.values_list("name", "ready")) == {
        "gke-llm-gpu-pool-1a2b-0": False,
        "gke-llm-gpu-pool-1a2b-1": False,
    }
    assert Node.objects.get(name="gke-llm-gpu-pool-1a2b-1").taints == [TAINT]

    fake_kube.remove(node("gke-llm-gpu-pool-1a2b-1"))
    session(cluster, api, watch.NODES)
    assert list(Node.objects.values_list("name", flat=True)) == ["gke-llm-gpu-pool-1a2b-0"]


TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def test_pods_of_submitted_objects_hold_their_nodes_accelerators_until_they_end(
    cluster, api, fake_kube
):
    assert not Pod.objects.exists()  # a real cluster's pods are never simulated
    for name in ("gpu-node-0", "gpu-node-1"):
        fake_kube.put(node(name))
    session(cluster, api, watch.NODES)
    fake_kube.put(trainer(0, node_name="gpu-node-0"))
    fake_kube.put(trainer(1, node_name="", phase="Pending", gated=True))
    replica = pod("inference-5d8f9c7b6-x2x9k", owners=[("ReplicaSet", "inference-5d8f9c7b6")])
    fake_kube.put(replica)
    fake_kube.put(pod("someone-elses", node_name="gpu-node-1"))

    session(cluster, api, watch.PODS)

    pods = {p.name: p for p in Pod.objects.select_related("node", "workload__owner")}
    assert set(pods) == {"finetune-0-x7k2p", "finetune-1-x7k2p", "inference-5d8f9c7b6-x2x9k"}
    running = pods["finetune-0-x7k2p"]
    assert (running.node.name, running.phase, running.ready) == ("gpu-node-0", "Running", True)
    assert running.scheduling["requests"] == {"cpu": 1000, "nvidia.com/gpu": 2000}
    assert running.workload.owner.name == "finetune"
    assert (pods["finetune-1-x7k2p"].phase, pods["finetune-1-x7k2p"].node) == (
        "SchedulingGated",
        None,
    )
    assert pods["inference-5d8f9c7b6-x2x9k"].workload == Workload.objects.get(
        owner__name="inference"
    )
    assert gpus(cluster) == (4, 2)

    fake_kube.put(trainer(0, node_name="gpu-node-0", phase="Succeeded"))
    fake_kube.remove(replica)
    session(cluster, api, watch.PODS)
    assert Pod.objects.get(name="finetune-0-x7k2p").node is None
    assert not Pod.objects.filter(name=replica["metadata"]["name"]).exists()
    assert gpus(cluster) == (4, 0)


def test_a_relist_forgets_pods_deleted_while_nobody_watched(cluster, api, fake_kube):
    fake_kube.put(trainer(0))
    session(cluster, api, watch.PODS)
    fake_kube.remove(trainer(0))
    fake_kube.put(trainer(1))
    fake_kube.compact()  # the stored version expired: the next session lists again

    relisted = session(cluster, api, watch.PODS)

    assert relisted.relisted
    assert list(Pod.objects.values_list("name", flat=True)) == ["finetune-1-x7k2p"]


def test_a_pod_seen_before_its_node_is_bound_to_it_when_the_node_comes(cluster, api, fake_kube):
    fake_kube.put(trainer(0, node_name="late-node"))
    session(cluster, api, watch.PODS)
    assert Pod.objects.get().node is None

    fake_kube.put(node("late-node"))
    session(cluster, api, watch.NODES)

    assert Pod.objects.get().node.name == "late-node"
    assert gpus(cluster) == (2, 2)
