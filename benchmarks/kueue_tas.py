"""Kueue's Topology Aware Scheduling performance suite (kueue-perf.md §1c), in virtual time.

640 nodes (1 block x 10 racks x 64 nodes of 96 cpu / 256Gi) behind one TAS ResourceFlavor
with the levels block, rack, hostname; the baseline's 5 cohorts x 6 ClusterQueues; per
ClusterQueue 350 small (2 pods x 500m: 120 rack-required, 120 rack-preferred, 110 "balanced"
= rack slices of 1), 100 medium (4 x 1250m: 34/33/33, slices of 2) and 50 large (8 x 2500m:
17/17/16, slices of 4) Jobs, run as `perfsuite` describes, beside Kueue's figures.

    python benchmarks/kueue_tas.py [--scale 0.2]
"""

from __future__ import annotations

from perfsuite import Suite, Variant, WorkloadClass, main

from clusters.models import Cluster, Node, NodePool

BLOCK, RACK, HOST = "accelplane.dev/block", "accelplane.dev/rack", "kubernetes.io/hostname"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
RACKS, NODES_PER_RACK = 10, 64
GI = 2**30


def variants(
    counts: tuple[int, int, int], slice_size: int, kueue: tuple[float, ...]
) -> tuple[Variant, ...]:
    required, preferred, balanced = counts
    return (
        Variant("required", required, {REQUIRED: RACK}, kueue[0]),
        Variant("preferred", preferred, {PREFERRED: RACK}, kueue[1]),
        Variant("balanced", balanced, {SLICE_LEVEL: RACK, SLICE_SIZE: str(slice_size)}, kueue[2]),
    )


def make_nodes(cluster: Cluster) -> None:
    pool = NodePool.objects.create(
        cluster=cluster,
        name="perf",
        machine_type="n2-standard-96",
        node_count=RACKS * NODES_PER_RACK,
        status=NodePool.Status.RUNNING,
    )
    allocatable = {"cpu": 96_000, "memory": 256 * GI * 1000, "pods": 110_000}
    Node.objects.bulk_create(
        Node(
            cluster=cluster,
            node_pool=pool,
            name=f"node-{rack}-{index}",
            labels={BLOCK: "b0", RACK: f"r{rack}", HOST: f"node-{rack}-{index}"},
            allocatable=allocatable,
            capacity=allocatable,
        )
        for rack in range(RACKS)
        for index in range(NODES_PER_RACK)
    )


TAS = Suite(
    title="Kueue TAS suite",
    classes=(
        WorkloadClass(
            "small",
            100,
            200,
            50,
            2,
            "500m",
            variants((120, 120, 110), 1, (246_755, 246_090, 237_846)),
            243_564,
        ),
        WorkloadClass(
            "medium",
            500,
            500,
            100,
            4,
            "1250m",
            variants((34, 33, 33), 2, (107_071, 106_324, 106_303)),
            106_566,
        ),
        WorkloadClass(
            "large",
            1200,
            1000,
            200,
            8,
            "2500m",
            variants((17, 17, 16), 4, (39_625, 39_573, 37_862)),
            39_020,
        ),
    ),
    kueue_wall_ms=401_472,
    kueue_usage=62.41,
    target_wall_s=60,
    flavor_spec={"topologyName": "perf-topology", "nodeLabels": {BLOCK: "b0"}},
    extra_documents=(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": "perf-topology"},
            "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]},
        },
    ),
    make_nodes=make_nodes,
)

if __name__ == "__main__":
    main(TAS, __doc__ or "")
