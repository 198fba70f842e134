"""TPU workloads through TAS and the slice controller's admission check, on two tpu7x cubes."""

from __future__ import annotations

import contextlib
import json

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from clusters import services as cluster_services
from clusters.models import Cluster, Node, NodeGeneration
from events.models import Event
from tests.support import T0, at, tpu_jobset
from workloads import admission, parking, runtime, services, snapshot
from workloads.models import Pod, Slice, Workload

NAMESPACE = "llm"
HOSTNAME = "kubernetes.io/hostname"

TOPOLOGY = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: slice-topology}
spec:
  levels:
  - nodeLabel: cloud.google.com/gce-topology-block
  - nodeLabel: cloud.google.com/gke-tpu-partition-4x4x4-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x4x4-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x2x4-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x2x2-id
  - nodeLabel: cloud.google.com/gke-tpu-partition-2x2x1-id
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: slice-rf}
spec:
  nodeLabels: {cloud.google.com/gke-tpu-accelerator: tpu7x}
  topologyName: slice-topology
"""


def queues(controller="accelerator.gke.io/slice"):
    return f"""\
{TOPOLOGY}---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {{name: ac}}
spec: {{controllerName: {controller}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  namespaceSelector: {{}}
  admissionChecksStrategy: {{admissionChecks: [{{name: ac}}]}}
  preemption: {{withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [google.com/tpu]
    flavors:
    - name: slice-rf
      resources: [{{name: google.com/tpu, nominalQuota: "999"}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: lq, namespace: {NAMESPACE}}}
spec: {{clusterQueue: cq}}
"""


def jobset(name="js", shape="2x2x2", replicas=2, parallelism=2):
    return tpu_jobset(name, shape, replicas, parallelism)


@pytest.fixture
def tpu_cluster(db):
    row = Cluster.objects.create(name="tpu-cluster", status=Cluster.Status.RUNNING)
    for pool in ("tpu7-pool-1", "tpu7-pool-2"):
        cluster_services.provision_now(
            row,
            name=pool,
            machine_type="tpu7x-standard-4t",
            node_count=16,
            tpu_topology="4x4x4",
            block="block-0",
            at=T0,
        )
    return row


def apply(cluster, text, seconds=0):
    services.apply(cluster, text, source="t.yaml", now=at(seconds), namespace=NAMESPACE)


@pytest.fixture
def sliced(tpu_cluster):
    apply(tpu_cluster, queues())
    return tpu_cluster


def test_snapshot_carries_topologies_nodes_and_the_webhooks_topology_request(sliced):
    apply(sliced, jobset())

    snap = snapshot.load(sliced).snapshot

    assert snap.topologies["slice-topology"].levels[-1] == HOSTNAME
    assert len(snap.nodes) == 32
    (workload,) = snap.workloads
    request = workload.pod_sets[0].topology_request
    assert request is not None
    assert request.slice_level == "cloud.google.com/gke-tpu-partition-2x2x2-id"


def test_the_next_snapshot_sees_nodes_that_changed_since_the_last(sliced):
    first = snapshot.load(sliced).snapshot
    assert all(n.ready for n in first.nodes)
    failed, gone = first.nodes[0].name, first.nodes[1].name

    Node.objects.filter(cluster=sliced, name=failed).update(ready=False)
    Node.objects.filter(cluster=sliced, name=gone).delete()
    nodes = {n.name: n for n in snapshot.load(sliced).snapshot.nodes}

    assert len(nodes) == 31
    assert gone not in nodes
    assert not nodes[failed].ready


def test_topology_assignment_round_trips_through_the_stored_admission(sliced):
    apply(sliced, jobset())
    row = Workload.objects.get()

    loaded = snapshot.admission(row.admission)

    assert loaded is not None
    assignment = loaded.pod_sets[0].topology_assignment
    assert assignment is not None
    assert snapshot.admission_json(loaded) == row.admission
    assert assignment.pod_count == 4


def test_pods_of_an_unqueued_workload_count_as_non_tas_usage(sliced):
    text = jobset("free").replace("labels: {kueue.x-k8s.io/queue-name: lq}", "labels: {}")
    apply(sliced, text)

    usage = snapshot.load(sliced).snapshot.non_tas_usage

    assert sum(u.get("google.com/tpu", 0) for u in usage.values()) == 4 * 4000
    assert sum(u["pods"] for u in usage.values()) == 4 * 1000


def test_pods_of_a_workload_with_a_topology_assignment_are_not_non_tas_usage(sliced):
    apply(sliced, jobset())
    admission.advance(sliced, at(), at(seconds=30))
    assert Pod.objects.filter(node__isnull=False).count() == 4

    assert snapshot.load(sliced).snapshot.non_tas_usage == {}


def test_quota_reserved_workload_waits_for_its_slices_without_pods(sliced):
    apply(sliced, jobset())

    row = Workload.objects.get()
    assert row.phase == Workload.Phase.QUOTA_RESERVED
    assert not Pod.objects.exists()
    assert list(Slice.objects.values_list("state", flat=True)) == ["ACTIVATING"] * 2


def test_workload_is_admitted_once_its_slices_are_active(sliced):
    apply(sliced, jobset())

    admission.advance(sliced, at(), at(seconds=30))

    assert Workload.objects.get().phase == Workload.Phase.ADMITTED
    assert set(Slice.objects.values_list("state", flat=True)) == {"ACTIVE"}
    assert Pod.objects.count() == 4


def test_next_event_is_the_slice_activation(sliced):
    apply(sliced, jobset())

    assert runtime.next_event_at(sliced) == at(seconds=30)


def test_each_sub_slice_holds_the_two_hosts_of_one_2x2x2_partition(sliced):
    apply(sliced, jobset())

    for item in Slice.objects.all():
        assert item.topology == "2x2x2"
        assert len(item.partition_ids) == 1
        assert len(item.hosts) == 2
        assert len(item.name) <= 49


def test_pods_are_bound_to_exactly_the_assigned_hosts(sliced):
    apply(sliced, jobset())
    admission.advance(sliced, at(), at(seconds=30))

    row = Workload.objects.get()
    (assignment,) = row.admission["pod_sets"]
    assigned = sorted(d["values"][-1] for d in assignment["topology"]["domains"])
    bound = sorted(p.node.name for p in Pod.objects.select_related("node"))
    assert bound == assigned
    hosts = sorted(h for s in Slice.objects.all() for h in s.hosts)
    assert bound == hosts


def test_super_slice_is_one_slice_over_both_cubes(sliced):
    apply(sliced, jobset("big", shape="4x4x8", replicas=1, parallelism=32))

    (item,) = Slice.objects.all()
    assert item.topology == "4x4x8"
    assert len(item.partition_ids) == 2
    assert item.node_pools == ["tpu7-pool-1", "tpu7-pool-2"]
    assert len(item.hosts) == 32


def test_evicted_workload_loses_its_slices(sliced):
    apply(sliced, jobset())
    admission.advance(sliced, at(), at(seconds=30))
    Workload.objects.update(evicting=True, eviction_reason="Preempted")

    runtime.stop_evicted(sliced, at(seconds=40))

    assert not Slice.objects.exists()
    assert Event.objects.filter(kind="slice.deleted").count() == 2


def test_finished_workload_loses_its_slices(sliced):
    apply(sliced, jobset())
    admission.advance(sliced, at(), at(seconds=30))

    services.end(services.get_object(sliced, "JobSet", NAMESPACE, "js"), at(60), failed=False)

    assert not Slice.objects.exists()


def test_another_controllers_check_admits_at_once_without_slices(tpu_cluster):
    apply(tpu_cluster, queues(controller="example.com/other"))

    apply(tpu_cluster, jobset())

    assert Workload.objects.get().phase == Workload.Phase.ADMITTED
    assert not Slice.objects.exists()


def lws(replicas=2):
    template = """
        metadata:
          annotations: {cloud.google.com/gke-tpu-slice-topology: "2x2x2"}
        spec:
          nodeSelector: {cloud.google.com/gke-tpu-accelerator: tpu7x}
          containers:
            - name: c
              resources: {limits: {google.com/tpu: "4"}}"""
    return f"""\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: serve
  namespace: {NAMESPACE}
  labels: {{kueue.x-k8s.io/queue-name: lq}}
spec:
  replicas: {replicas}
  leaderWorkerTemplate:
    size: 2
    leaderTemplate:{template}
    workerTemplate:{template}
"""


def test_each_lws_group_gets_one_slice_holding_its_leader_and_worker(sliced):
    apply(sliced, lws())
    admission.advance(sliced, at(), at(seconds=30))

    assert Workload.objects.filter(phase=Workload.Phase.ADMITTED).count() == 2
    assert Slice.objects.count() == 2
    for item in Slice.objects.select_related("workload"):
        pods = Pod.objects.filter(workload=item.workload).select_related("node")
        assert sorted(p.node.name for p in pods) == item.hosts


def test_scaling_a_lws_down_deletes_the_removed_groups_slice(sliced):
    apply(sliced, lws())
    admission.advance(sliced, at(), at(seconds=30))

    services.scale(services.get_object(sliced, "LeaderWorkerSet", NAMESPACE, "serve"), 1, at(60))

    assert Workload.objects.filter(phase=Workload.Phase.ADMITTED).count() == 1
    assert Slice.objects.count() == 1


@pytest.mark.parametrize("replicas", [1, 4])
def test_snapshot_of_a_tas_cluster_runs_a_fixed_number_of_queries(
    sliced, django_assert_num_queries, replicas, settings
):
    settings.ADMISSION_CACHE_VERIFY = False  # which reads the queue objects again
    apply(sliced, jobset(replicas=replicas))
    admission.advance(sliced, at(), at(seconds=30))

    releases = parking.releases(sliced.pk)  # as admission counts them, first
    # The queue objects' and the nodes' stamps (both kept), the workloads, the bound pods.
    with django_assert_num_queries(4):
        snapshot.load(sliced, releases=releases)


def test_stored_manifest_keeps_the_annotations_as_applied(sliced):
    apply(sliced, jobset())

    obj = services.get_object(sliced, "JobSet", NAMESPACE, "js")
    job = obj.manifest["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["template"]["metadata"]["annotations"] == {
        "cloud.google.com/gke-tpu-slice-topology": "2x2x2"
    }


def test_an_unchanged_fleet_is_not_read_again_and_any_write_to_it_shows(sliced):
    """The converted nodes are kept while the cluster's NodeGeneration, a stamp triggers renew
    at every write to its nodes, stays the same: whoever writes, even in plain SQL."""
    first = snapshot.cluster_nodes(sliced.pk)
    with CaptureQueriesContext(connection) as queries:
        assert snapshot.cluster_nodes(sliced.pk) is first
    assert len(queries) == 1
    assert "clusters_nodegeneration" in queries[0]["sql"]

    name = first.nodes[0].name
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE clusters_node SET labels = %s WHERE cluster_id = %s AND name = %s",
            [json.dumps({"written": "in SQL"}), sliced.pk, name],
        )
    changed = snapshot.cluster_nodes(sliced.pk)
    assert changed.nodes[0].labels == {"written": "in SQL"}

    node = Node.objects.get(cluster=sliced, name=name)
    node.pk, node.name = None, "added"
    node.save()
    assert "added" in snapshot.cluster_nodes(sliced.pk).ids

    cluster_id = sliced.pk
    assert NodeGeneration.objects.filter(cluster_id=cluster_id).exists()
    sliced.delete()
    assert not NodeGeneration.objects.filter(cluster_id=cluster_id).exists()


def test_a_rolled_back_write_to_nodes_never_stands_for_another(sliced):
    """A reader that saw its own write to the nodes, rolled back, must not take a later write
    for that one: each write stamps the generation anew (a count would repeat)."""
    first, second = (n.name for n in snapshot.cluster_nodes(sliced.pk).nodes[:2])

    with contextlib.suppress(RuntimeError), transaction.atomic():
        Node.objects.filter(cluster=sliced, name=first).update(ready=False)
        seen = {n.name: n.ready for n in snapshot.cluster_nodes(sliced.pk).nodes}
        assert not seen[first]
        raise RuntimeError("rolled back")
    Node.objects.filter(cluster=sliced, name=second).update(ready=False)

    now = {n.name: n.ready for n in snapshot.cluster_nodes(sliced.pk).nodes}
    assert (now[first], now[second]) == (True, False)
