"""TAS end to end in the pure scheduler: the TPU dynamic-slicing seeds (seeds.md §B.3-B.4)."""

from __future__ import annotations

from dataclasses import replace

from scheduler import PodSet, PodSetAssignment, Snapshot, Workload, schedule
from scheduler.topology import TopologyRequest, place_workload, request_from_annotations
from tests.shared import requires_shared
from tests.unit.scheduler.builders import LOWER, cq
from tests.unit.scheduler.test_topology import (
    SLICE_LEVELS,
    SLICE_RF,
    SLICE_TOPOLOGY,
    TPU,
    TPU_TOLERATION,
    partition_id_label,
    tpu_nodes,
)
from tests.unit.test_manifests import seed_doc
from workloads.manifests import workload_shape
from workloads.manifests.slices import SLICE_GROUP, slice_annotations

QUEUE = cq("cq", {"slice-rf": {TPU: 999999 * 1000, "cpu": 999999 * 1000}}, within=LOWER)


def job(key, count, shape, size, priority, created):
    request = TopologyRequest(
        required=SLICE_LEVELS[0], slice_level=partition_id_label(shape), slice_size=size
    )
    ps = PodSet(
        "main",
        count,
        {TPU: 4000},
        {"cloud.google.com/gke-tpu-accelerator": "tpu7x"},
        tolerations=(TPU_TOLERATION,),
        topology_request=request,
    )
    return Workload(key, "cq", priority, created, (ps,))


def snap(workloads):
    return Snapshot(
        {"cq": QUEUE},
        {},
        {"slice-rf": SLICE_RF},
        tuple(workloads),
        topologies={"slice-topology": SLICE_TOPOLOGY},
        nodes=tuple(tpu_nodes()),
    )


def admit_all(workloads, decisions):
    by_key = {a.workload: a for a in decisions.admitted}
    return [
        replace(w, admission=by_key[w.key].admission, quota_reserved_at=0.0)
        if w.key in by_key
        else w
        for w in workloads
    ]


def evict(workloads, victims):
    return [replace(w, admission=None) if w.key in victims else w for w in workloads]


def test_dynamic_slicing_seed_sequence_preempts_and_repacks_by_priority():
    """The seed's story at the scheduler level: sub-slices, a super-slice that preempts them,
    then serving groups that preempt the super-slice while the sub-slices fit again beside."""
    sub = job("sub", 12, "2x2x2", 2, 1000, 1.0)
    wls = [sub]
    d = schedule(snap(wls))
    assert [a.workload for a in d.admitted] == ["sub"]
    ta = d.admitted[0].admission.pod_sets[0].topology_assignment
    assert ta is not None
    assert ta.pod_count == 12
    wls = admit_all(wls, d)

    sup = job("super", 32, "4x4x4", 16, 2000, 2.0)
    wls.append(sup)
    d = schedule(snap(wls))
    assert d.admitted == ()
    assert [(p.preemptor, [v.workload for v in p.victims]) for p in d.preemptions] == [
        ("super", ["sub"])
    ]
    wls = evict(wls, {"sub"})
    d = schedule(snap(wls))
    assert [a.workload for a in d.admitted] == ["super"]
    assert d.admitted[0].admission.pod_sets[0].topology_assignment.pod_count == 32
    wls = admit_all(wls, d)

    groups = [job(f"pd-{i}", 2, "2x2x2", 2, 3000, 3.0 + i) for i in range(8)]
    wls += groups
    d = schedule(snap(wls))
    assert {v.workload for p in d.preemptions for v in p.victims} == {"super"}
    wls = evict(wls, {"super"})
    d = schedule(snap(wls))
    assert {a.workload for a in d.admitted} == {*(g.key for g in groups), "sub"}
    wls = admit_all(wls, d)
    used = sum(
        ps.topology_assignment.pod_count for w in wls if w.admission for ps in w.admission.pod_sets
    )
    assert used == 28  # 112 chips


# -- the LWS seed: a leader-worker group is one slice (seeds.md §B.4) --------------------------

PREFILL = "dynamic-slicing/kueue-lws-prefill-model-streamer.yaml"
CUBE_2X2X2 = partition_id_label("2x2x2")


def seed_pod_sets(annotations_of=lambda spec: spec.annotations):
    """The prefill LWS group's PodSets as the webhook leaves them, asking only for chips."""
    shape = workload_shape(seed_doc(PREFILL, "LeaderWorkerSet"))
    return [
        PodSet(
            spec.name,
            spec.count,
            {TPU: spec.requests[TPU]},
            {"cloud.google.com/gke-tpu-accelerator": "tpu7x"},
            tolerations=(TPU_TOLERATION,),
            topology_request=request_from_annotations(annotations_of(spec)),
        )
        for spec in shape.pod_sets
    ]


def place_group(pod_sets, used):
    nodes = tpu_nodes()
    assignments = [PodSetAssignment(p.name, {TPU: "slice-rf"}, p.count) for p in pod_sets]
    flavors, topologies = {"slice-rf": SLICE_RF}, {"slice-topology": SLICE_TOPOLOGY}
    placed = place_workload(pod_sets, assignments, flavors, topologies, nodes, used)
    partition = {n.name: n.labels[CUBE_2X2X2] for n in nodes}
    return {
        name: {partition[d.values[0]] for d in p.assignment.domains} for name, p in placed.items()
    }


@requires_shared
def test_lws_seed_group_lands_in_one_2x2x2_partition_by_construction():
    """Leader and worker share a podset-group-name and require the 2x2x2 partition, so the
    group's two hosts form one slice even when BestFit would put the leader into a partition
    that has room for it alone."""
    leader, worker = seed_pod_sets()
    assert leader.topology_request == worker.topology_request
    assert leader.topology_request == TopologyRequest(required=CUBE_2X2X2, group=SLICE_GROUP)
    half_used = {tpu_nodes()[0].name: {TPU: 4000, "pods": 1000}}
    together = place_group([leader, worker], half_used)
    assert together["leader"] == together["worker"]
    assert len(together["leader"]) == 1
    assert together["leader"] != {tpu_nodes()[0].labels[CUBE_2X2X2]}

    def per_pod_set(spec):  # the webhook's annotations before groups: one slice per PodSet
        requests = {TPU: spec.requests[TPU]}
        return slice_annotations("2x2x2", spec.count, spec.count, requests)

    apart = place_group(seed_pod_sets(per_pod_set), half_used)
    assert apart["leader"] != apart["worker"]
