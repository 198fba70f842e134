from itertools import pairwise

import pytest

from clusters import catalog
from clusters.catalog import CatalogError, Taint

GIB, MIB = 1 << 30, 1 << 20


def tpu7x_pool(pool="tpu7-pool-1", cluster="superslice"):
    return catalog.node_templates(
        cluster=cluster,
        pool=pool,
        machine_type="tpu7x-standard-4t",
        nodes=16,
        tpu_topology="4x4x4",
    )


def test_g2_standard_24_node_has_two_l4_gpus_and_the_gpu_taint():
    (node,) = catalog.node_templates(
        cluster="llm-cluster", pool="gpupool", machine_type="g2-standard-24", nodes=1
    )
    assert node.capacity["nvidia.com/gpu"] == 2000
    assert node.allocatable["nvidia.com/gpu"] == 2000
    assert node.labels["cloud.google.com/gke-accelerator"] == "nvidia-l4"
    assert node.labels["cloud.google.com/gke-gpu-driver-version"] == "latest"
    assert node.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)


def test_node_names_are_deterministic_and_hostnames():
    first = catalog.node_templates(
        cluster="llm-cluster", pool="gpupool", machine_type="g2-standard-24", nodes=2
    )
    again = catalog.node_templates(
        cluster="llm-cluster", pool="gpupool", machine_type="g2-standard-24", nodes=2
    )
    assert [n.name for n in first] == [n.name for n in again]
    assert first[0].name.startswith("gke-llm-cluster-gpupool-")
    assert first[0].name.endswith("-0")
    assert all(n.labels["kubernetes.io/hostname"] == n.name for n in first)
    assert first[0].labels["topology.kubernetes.io/region"] == "us-central1"


def test_allocatable_is_capacity_minus_gke_reservations_on_g2_standard_24():
    (node,) = catalog.node_templates(cluster="c", pool="p", machine_type="g2-standard-24", nodes=1)
    # CPU, 24 cores: 6% of 1000m + 1% of 1000m + 0.5% of 2000m + 0.25% of 20000m
    #   = 60 + 10 + 10 + 50 = 130m.
    assert node.capacity["cpu"] == 24_000
    assert node.allocatable["cpu"] == 23_870
    # Memory, 96 GiB: 25% of 4 + 20% of 4 + 10% of 8 + 6% of 80 = 1 + 0.8 + 0.8 + 4.8 = 7.4 GiB
    #   = 7_945_689_497.6 bytes, rounded up; plus the 100 MiB eviction threshold.
    capacity = 96 * GIB
    reserved = 7_945_689_498 + 100 * MIB
    assert node.capacity["memory"] == capacity * 1000
    assert node.allocatable["memory"] == (capacity - reserved) * 1000
    assert node.allocatable["pods"] == 110_000
    assert node.allocatable["ephemeral-storage"] < node.capacity["ephemeral-storage"]


def test_gke_allocatable_matches_the_documented_4_cpu_example():
    # GKE "Plan node sizes" shows a 4-vCPU node with cpu capacity 4 and allocatable 3920m.
    cpu, _ = catalog.gke_allocatable(4000, 16 * GIB)
    assert cpu == 3920


def test_gke_allocatable_reserves_255_mib_below_one_gib():
    _, memory = catalog.gke_allocatable(1000, 614 * MIB)
    assert memory == (614 - 255 - 100) * MIB


def test_every_tpu7x_host_is_in_one_partition_of_each_shape_with_nested_sizes():
    nodes = tpu7x_pool()
    names = sorted(n.name for n in nodes)
    for shape, hosts in zip(catalog.PARTITION_SHAPES, (1, 2, 4, 8, 16), strict=True):
        partitions = catalog.partition_hosts(nodes, shape)
        assert len(partitions) == 16 // hosts
        assert all(len(members) == hosts for members in partitions.values())
        assert sorted(n for members in partitions.values() for n in members) == names


def test_tpu7x_partitions_nest_inside_the_next_larger_shape():
    nodes = tpu7x_pool()
    for small, large in pairwise(catalog.PARTITION_SHAPES):
        small_key = catalog.partition_id_label(small)
        large_key = catalog.partition_id_label(large)
        parent = {}
        for node in nodes:
            parent.setdefault(node.labels[small_key], set()).add(node.labels[large_key])
        assert all(len(larger) == 1 for larger in parent.values())


def test_tpu7x_2x2x2_partitions_are_two_hosts_adjacent_along_one_axis():
    nodes = tpu7x_pool()
    by_name = {n.name: n for n in nodes}
    for first, second in catalog.partition_hosts(nodes, "2x2x2").values():
        a, b = by_name[first].coordinates, by_name[second].coordinates
        steps = sorted(
            abs(x - y) // size for x, y, size in zip(a, b, catalog.HOST_SHAPE, strict=True)
        )
        assert steps == [0, 0, 1]


def test_tpu7x_hosts_tile_the_cube_with_distinct_origins():
    origins = {n.coordinates for n in tpu7x_pool()}
    assert len(origins) == 16
    assert all(0 <= x < 4 and 0 <= y < 4 and 0 <= z < 4 for x, y, z in origins)


def test_tpu7x_hosts_carry_dynamic_slicing_labels_but_no_topology_yet():
    node = tpu7x_pool()[0]
    assert node.labels["cloud.google.com/gke-tpu-accelerator"] == "tpu7x"
    assert node.labels["cloud.google.com/gke-accelerator-topology-mode"] == "PROVISION_ONLY"
    assert node.labels["cloud.google.com/gce-topology-block"] == "block-0"
    assert node.labels["cloud.google.com/gke-tpu-reservation-subblock"]
    assert node.labels["cloud.google.com/gke-tpu-partition-2x2x2-state"] == "HEALTHY"
    assert "cloud.google.com/gke-tpu-topology" not in node.labels
    assert node.taints == (Taint("google.com/tpu", "present", "NoSchedule"),)
    assert node.allocatable["google.com/tpu"] == 4000


def test_tpu7x_partition_label_keys_match_the_kueue_topology_levels():
    levels = [
        "cloud.google.com/gce-topology-block",
        "cloud.google.com/gke-tpu-partition-4x4x4-id",
        "cloud.google.com/gke-tpu-partition-2x4x4-id",
        "cloud.google.com/gke-tpu-partition-2x2x4-id",
        "cloud.google.com/gke-tpu-partition-2x2x2-id",
        "cloud.google.com/gke-tpu-partition-2x2x1-id",
        "kubernetes.io/hostname",
    ]
    assert all(level in tpu7x_pool()[5].labels for level in levels)


def test_partition_ids_are_unique_across_two_pools_of_one_cluster():
    first, second = tpu7x_pool("tpu7-pool-1"), tpu7x_pool("tpu7-pool-2")
    for shape in catalog.PARTITION_SHAPES:
        ids_first = set(catalog.partition_hosts(first, shape))
        ids_second = set(catalog.partition_hosts(second, shape))
        assert not ids_first & ids_second
    assert not {n.name for n in first} & {n.name for n in second}


def test_pd_pod_fits_a_tpu7x_host():
    node = tpu7x_pool()[0]
    # seeds.md B.1: every prefill/decode pod requests google.com/tpu 4, cpu 220, memory 850Gi.
    assert node.allocatable["google.com/tpu"] >= 4000
    assert node.allocatable["cpu"] >= 220_000
    assert node.allocatable["memory"] >= 850 * GIB * 1000


def test_v5e_2x4_single_host_node_has_8_chips_and_topology_2x4():
    nodes = catalog.node_templates(
        cluster="c", pool="v5e", machine_type="ct5lp-hightpu-8t", nodes=2, tpu_topology="2x4"
    )
    assert len(nodes) == 2
    assert nodes[0].capacity["google.com/tpu"] == 8000
    assert nodes[0].labels["cloud.google.com/gke-tpu-topology"] == "2x4"
    assert nodes[0].labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5-lite-podslice"
    assert catalog.LABEL_TPU_SLICE not in nodes[0].labels
    assert nodes[0].coordinates is None


def test_v5e_multi_host_pool_labels_its_hosts_as_one_slice():
    nodes = catalog.node_templates(
        cluster="c", pool="v5e", machine_type="ct5lp-hightpu-4t", nodes=4, tpu_topology="4x4"
    )
    assert catalog.hosts_per_slice("ct5lp-hightpu-4t", "4x4") == 4
    slices = [n.labels[catalog.LABEL_TPU_SLICE] for n in nodes]
    assert slices == ["v5e-slice-0"] * 4


def test_validate_pool_rejects_an_unknown_machine_type():
    with pytest.raises(CatalogError, match=r"^machineType: 'g9-foo' is not a known machine type"):
        catalog.validate_pool("g9-foo", 1, None)


def test_validate_pool_rejects_a_tpu7x_pool_of_15_nodes():
    with pytest.raises(CatalogError, match=r"^nodes: 15 must be 16") as error:
        catalog.validate_pool("tpu7x-standard-4t", 15, "4x4x4")
    assert error.value.field == "nodes"


def test_validate_pool_rejects_topology_4x4_on_v5e_8t():
    with pytest.raises(
        CatalogError, match=r"^tpuTopology: '4x4' is not offered on ct5lp-hightpu-8t"
    ):
        catalog.validate_pool("ct5lp-hightpu-8t", 1, "4x4")


def test_validate_pool_rejects_a_topology_on_g2():
    with pytest.raises(CatalogError, match=r"^tpuTopology: '2x2' is only valid on TPU machine"):
        catalog.validate_pool("g2-standard-24", 1, "2x2")


def test_validate_pool_rejects_a_tpu_machine_without_topology():
    with pytest.raises(CatalogError, match=r"^tpuTopology: None is required for ct5lp-hightpu-4t"):
        catalog.validate_pool("ct5lp-hightpu-4t", 1, None)


def test_validate_pool_rejects_a_v5e_multi_host_pool_that_is_not_one_slice():
    with pytest.raises(CatalogError, match=r"^nodes: 3 must be 2: a multi-host 2x4"):
        catalog.validate_pool("ct5lp-hightpu-4t", 3, "2x4")


def test_catalog_lists_published_machine_shapes():
    a3 = catalog.get_machine_type("a3-highgpu-8g")
    assert (a3.cpu_milli, a3.memory_bytes) == (208_000, 1872 * GIB)
    assert a3.accelerator == "nvidia-h100-80gb"
    assert catalog.get_machine_type("tpu7x-standard-4t").tpu_topologies == ("4x4x4",)
    assert catalog.get_machine_type("e2-standard-2").is_gpu is False


def test_node_names_of_long_cluster_and_pool_names_fit_a_hostname_label():
    nodes = catalog.node_templates(
        cluster="c" * 63, pool="p" * 40, machine_type="e2-standard-2", nodes=2
    )
    assert all(len(n.name) <= 63 for n in nodes)
    assert len({n.name for n in nodes}) == 2
