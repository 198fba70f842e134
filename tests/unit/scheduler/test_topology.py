"""Topology Aware Scheduling (kueue-semantics §11): annotations, capacity, BestFit, slices.

Tests -> kueue-semantics §16 checklist items ("§11" where no item is about it):
  §11 annotations   test_pod_set_without_tas_annotations_has_no_request
                    test_required_annotation_gives_a_required_request
                    test_slice_annotations_give_a_slice_level_and_size
                    test_group_name_is_kept_with_a_required_or_preferred_level
                    test_unconstrained_annotation_takes_go_booleans
                    test_unconstrained_false_asks_for_tas_without_a_level
                    test_annotations_the_webhook_rejects_raise
  §11 capacity      test_capacity_counts_only_ready_nodes_of_the_flavor_with_every_level_label
                    test_untolerated_taint_excludes_a_node_unless_pod_or_flavor_tolerates_it
                    test_node_selector_and_required_affinity_exclude_nodes
                    test_used_capacity_is_taken_off_the_free_capacity
                    test_every_pod_takes_one_of_the_nodes_pods
                    test_a_resource_the_node_lacks_fits_no_pod
                    test_node_filters_apply_only_when_the_lowest_level_is_the_hostname
  10  BestFit       test_required_rack_takes_the_tightest_rack_that_fits
                    test_required_rack_that_no_single_rack_holds_is_none
                    test_preferred_rack_climbs_to_the_block
                    test_preferred_spreads_over_blocks_when_no_block_holds_all
                    test_preferred_larger_than_the_whole_topology_is_none
                    test_descent_uses_as_few_hosts_as_possible_with_a_tight_last_one
                    test_equal_domains_are_taken_in_label_order
  §11 unconstrained test_unconstrained_packs_the_least_free_host_that_fits
                    test_unconstrained_too_big_for_one_host_fills_least_free_hosts_first
                    test_pod_set_without_request_is_placed_unconstrained_when_implied
  10  Kueue parity  test_placements_match_kueues_own_cases_on_its_default_nodes
  §11 slices        test_slices_stay_whole_inside_racks_of_the_required_block
                    test_slice_only_request_is_placed_unconstrained
                    test_preferred_block_with_rack_slices_spreads_slices_over_blocks
                    test_host_slices_are_placed_as_in_kueues_own_cases
                    test_invalid_slice_requests_place_nothing
                    test_zero_pods_get_an_empty_assignment
  §11 perf suite    test_rack_workloads_pack_racks_as_kueue_perf_tas_suite_submits_them
  §11 TPU7x         test_sub_slice_lands_on_six_distinct_2x2x2_partitions_two_hosts_each
                    test_sub_slice_packs_into_the_cube_already_in_use
                    test_super_slice_takes_both_whole_cubes
                    test_super_slice_does_not_fit_when_one_cube_is_half_used
  10  fragmented    test_fragmented_free_capacity_places_nothing_but_fits_when_empty
                    test_tpu_taint_needs_a_toleration_from_the_pod_or_the_flavor
  §11 workloads     test_later_pod_sets_see_what_earlier_ones_took
                    test_only_pod_sets_asking_for_tas_are_placed_unless_the_queue_is_tas_only
                    test_placement_stops_at_the_first_pod_set_that_does_not_fit
                    test_pod_set_without_a_tas_flavor_cannot_be_placed
                    test_flavor_eligibility_follows_kueue
                    test_a_queue_is_tas_only_when_every_flavor_has_a_known_topology
                    test_every_resource_of_a_tas_pod_set_is_contested
                    test_node_usage_charges_requests_and_one_pod_each
                    test_an_assignment_fits_until_others_take_its_room
                    test_pod_sets_of_one_workload_must_fit_together
                    test_topology_usage_holds_and_releases_by_workload
  §11 groups        test_group_fits_only_when_its_domain_holds_leader_and_workers
                    test_group_is_never_split_across_domains
                    test_group_sizes_every_pod_for_the_larger_request_and_charges_each_its_own
                    test_group_needs_one_tas_flavor_and_a_leader_of_one_pod
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace

import pytest

from clusters.catalog import node_templates, partition_id_label
from scheduler import Node, PodSet, PodSetAssignment, ResourceFlavor, Taint, Toleration
from scheduler.topology import (
    HOSTNAME,
    DomainAssignment,
    Topology,
    TopologyAssignment,
    TopologyRequest,
    TopologyUsage,
    add_usage,
    assignment_fits,
    assignment_fits_empty,
    find_assignment,
    flavor_mismatch,
    is_tas_only,
    node_usage,
    place_pod_set,
    place_workload,
    placements_fit,
    request_from_annotations,
    topology_frs,
)
from tests.unit.scheduler.builders import CPU, cq, req

BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
THREE = Topology("default", (BLOCK, RACK, HOSTNAME))
TAS = ResourceFlavor("tas", {"tas-node-group": "yes"}, topology_name="default")
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
GROUP = "kueue.x-k8s.io/podset-group-name"

Usage = Mapping[str, Mapping[str, int]]


def host(
    name: str,
    block: str,
    rack: str,
    cpu: int = 1,
    *,
    pods: int = 10,
    labels: Mapping[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    ready: bool = True,
) -> Node:
    """A node of the `tas` flavor whose hostname label is its name."""
    all_labels = {BLOCK: block, RACK: rack, HOSTNAME: name, "tas-node-group": "yes"}
    return Node(
        name,
        {**all_labels, **(labels or {})},
        taints,
        {"cpu": cpu * CPU, "pods": pods * 1000},
        ready,
    )


def ps(
    count: int,
    cpu: float = 1,
    request: TopologyRequest | None = None,
    *,
    name: str = "main",
    requests: Mapping[str, int] | None = None,
    **kwargs: object,
) -> PodSet:
    resources = dict(requests) if requests is not None else {"cpu": int(cpu * CPU)}
    pod_set = PodSet(name, count, resources, topology_request=request)
    return replace(pod_set, **kwargs) if kwargs else pod_set


def place(
    nodes: Iterable[Node],
    pod_set: PodSet,
    used: Usage | None = None,
    topology: Topology = THREE,
    flavor: ResourceFlavor = TAS,
) -> dict[str, int] | None:
    """Pods per host (or per lowest-level domain, its values joined with '/'); None: no fit."""
    found = find_assignment(topology, list(nodes), used or {}, flavor, pod_set, pod_set.count)
    if found is None:
        return None
    return {"/".join(d.values): d.count for d in found.domains}


def required(level: str, **kwargs: object) -> TopologyRequest:
    return replace(TopologyRequest(required=level), **kwargs)


def preferred(level: str, **kwargs: object) -> TopologyRequest:
    return replace(TopologyRequest(preferred=level), **kwargs)


UNCONSTRAINED_REQUEST = TopologyRequest(unconstrained=True)


# -- annotations (kueue-semantics §11) --------------------------------------------------------


def test_pod_set_without_tas_annotations_has_no_request():
    assert request_from_annotations({}) is None
    assert request_from_annotations({"cloud.google.com/gke-tpu-slice-topology": "2x2x2"}) is None


def test_required_annotation_gives_a_required_request():
    assert request_from_annotations({REQUIRED: RACK}) == TopologyRequest(required=RACK)
    assert request_from_annotations({PREFERRED: RACK}) == TopologyRequest(preferred=RACK)


def test_slice_annotations_give_a_slice_level_and_size():
    annotations = {REQUIRED: BLOCK, SLICE_LEVEL: RACK, SLICE_SIZE: "2"}
    assert request_from_annotations(annotations) == TopologyRequest(
        required=BLOCK, slice_level=RACK, slice_size=2
    )
    only_slices = request_from_annotations({SLICE_LEVEL: RACK, SLICE_SIZE: "4"})
    assert only_slices == TopologyRequest(slice_level=RACK, slice_size=4)
    assert only_slices.slice_only


def test_group_name_is_kept_with_a_required_or_preferred_level():
    assert request_from_annotations({PREFERRED: RACK, GROUP: "lws"}) == TopologyRequest(
        preferred=RACK, group="lws"
    )


def test_unconstrained_annotation_takes_go_booleans():
    for value in ("true", "True", "1", "t"):
        assert request_from_annotations({UNCONSTRAINED: value}) == UNCONSTRAINED_REQUEST


def test_unconstrained_false_asks_for_tas_without_a_level():
    request = request_from_annotations({UNCONSTRAINED: "false"})
    assert request == TopologyRequest()
    placement = place_pod_set(THREE, [host("x1", "b1", "r1")], {}, TAS, ps(1, 1, request), 1)
    assert placement.assignment is None
    assert placement.reason == "topology level not specified"


@pytest.mark.parametrize(
    "annotations",
    [
        {REQUIRED: RACK, PREFERRED: BLOCK},
        {PREFERRED: RACK, UNCONSTRAINED: "true"},
        {UNCONSTRAINED: "yes"},
        {REQUIRED: BLOCK, SLICE_LEVEL: RACK},
        {REQUIRED: BLOCK, SLICE_SIZE: "2"},
        {REQUIRED: BLOCK, SLICE_LEVEL: RACK, SLICE_SIZE: "two"},
        {REQUIRED: BLOCK, SLICE_LEVEL: RACK, SLICE_SIZE: "0"},
        {REQUIRED: BLOCK, GROUP: "7"},
        {REQUIRED: BLOCK, GROUP: "lws", SLICE_LEVEL: RACK, SLICE_SIZE: "2"},
        {GROUP: "lws"},
        {UNCONSTRAINED: "true", GROUP: "lws"},
    ],
)
def test_annotations_the_webhook_rejects_raise(annotations):
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        request_from_annotations(annotations)


# -- capacity (kueue-semantics §11) -----------------------------------------------------------


def test_capacity_counts_only_ready_nodes_of_the_flavor_with_every_level_label():
    nodes = [
        host("x1", "b1", "r1", ready=False),
        host("x2", "b1", "r1", labels={"tas-node-group": "no"}),
        Node("x3", {BLOCK: "b1", HOSTNAME: "x3", "tas-node-group": "yes"}, (), {"cpu": 8 * CPU}),
        host("x4", "b1", "r1"),
    ]
    assert place(nodes, ps(1, 1, required(RACK))) == {"x4": 1}
    assert place(nodes, ps(2, 1, UNCONSTRAINED_REQUEST)) is None


def test_untolerated_taint_excludes_a_node_unless_pod_or_flavor_tolerates_it():
    taint = Taint("dedicated", "ml", "NoSchedule")
    nodes = [host("x1", "b1", "r1", 4, taints=(taint,)), host("x2", "b1", "r1", 1)]
    assert place(nodes, ps(1, 1, required(HOSTNAME))) == {"x2": 1}
    assert place(nodes, ps(2, 1, required(HOSTNAME))) is None
    tolerant = ps(2, 1, required(HOSTNAME), tolerations=(Toleration("dedicated", "Exists"),))
    assert place(nodes, tolerant) == {"x1": 2}
    flavor = replace(TAS, tolerations=(Toleration("dedicated", "Equal", "ml"),))
    assert place(nodes, ps(2, 1, required(HOSTNAME)), flavor=flavor) == {"x1": 2}
    soft = Taint("dedicated", "ml", "PreferNoSchedule")
    assert place([host("x1", "b1", "r1", 4, taints=(soft,))], ps(2, 1, UNCONSTRAINED_REQUEST))


def test_node_selector_and_required_affinity_exclude_nodes():
    nodes = [
        host("x1", "b1", "r1", 4, labels={"gpu": "h100"}),
        host("x2", "b1", "r2", 4, labels={"gpu": "a100"}),
    ]
    by_selector = ps(2, 1, required(RACK), node_selector={"gpu": "a100"})
    assert place(nodes, by_selector) == {"x2": 2}
    by_affinity = ps(2, 1, required(RACK), required_affinity=((req("gpu", "In", "h100"),),))
    assert place(nodes, by_affinity) == {"x1": 2}
    assert place(nodes, ps(2, 1, required(RACK), node_selector={"gpu": "l4"})) is None


def test_used_capacity_is_taken_off_the_free_capacity():
    nodes = [host("x1", "b1", "r1", 4), host("x2", "b1", "r1", 4)]
    used = {"x1": {"cpu": 3 * CPU, "pods": 3000}}
    assert place(nodes, ps(4, 1, required(HOSTNAME)), used) == {"x2": 4}
    assert place(nodes, ps(5, 1, required(RACK)), used) == {"x1": 1, "x2": 4}
    assert place(nodes, ps(6, 1, required(RACK)), used) is None


def test_every_pod_takes_one_of_the_nodes_pods():
    nodes = [host("x1", "b1", "r1", 8, pods=2)]
    assert place(nodes, ps(2, 1, required(HOSTNAME))) == {"x1": 2}
    assert place(nodes, ps(3, 1, required(HOSTNAME))) is None
    assert place(nodes, ps(2, 0, required(HOSTNAME)), {"x1": {"pods": 1000}}) is None


def test_a_resource_the_node_lacks_fits_no_pod():
    nodes = [host("x1", "b1", "r1", 8)]
    assert place(nodes, ps(1, requests={"nvidia.com/gpu": 1000}, request=required(RACK))) is None
    assert place(nodes, ps(1, requests={"nvidia.com/gpu": 0}, request=required(RACK))) == {"x1": 1}


def test_node_filters_apply_only_when_the_lowest_level_is_the_hostname():
    # Kueue simulates kube-scheduler per node only for a hostname leaf; a rack leaf is one bin
    # summing its nodes' capacity, whatever their taints.
    taint = Taint("dedicated", "ml", "NoSchedule")
    nodes = [host("x1", "b1", "r1", 2, taints=(taint,)), host("x2", "b1", "r1", 2)]
    racks = Topology("racks", (BLOCK, RACK))
    assert place(nodes, ps(3, 1, required(RACK)), topology=racks) == {"b1/r1": 3}
    assert place(nodes, ps(3, 1, required(RACK))) is None


# -- BestFit at the requested level (checklist 10) ---------------------------------------------

#        b1                 b2
#    r1       r2        r1       r2
#  x1:4     x3:2 x4:1  x5:1     x6:8
#  x2:1                 x7:1
RACKS = [
    host("x1", "b1", "r1", 4),
    host("x2", "b1", "r1", 1),
    host("x3", "b1", "r2", 2),
    host("x4", "b1", "r2", 1),
    host("x5", "b2", "r1", 1),
    host("x7", "b2", "r1", 1),
    host("x6", "b2", "r2", 8),
]


def test_required_rack_takes_the_tightest_rack_that_fits():
    assert place(RACKS, ps(3, 1, required(RACK))) == {"x3": 2, "x4": 1}
    assert place(RACKS, ps(5, 1, required(RACK))) == {"x1": 4, "x2": 1}
    assert place(RACKS, ps(6, 1, required(RACK))) == {"x6": 6}


def test_required_rack_that_no_single_rack_holds_is_none():
    placement = place_pod_set(THREE, RACKS, {}, TAS, ps(9, 1, required(RACK)), 9)
    assert placement.assignment is None
    assert placement.reason == 'topology "default" allows to fit only 8 out of 9 pod(s)'
    assert placement.flavor == "tas"


def test_preferred_rack_climbs_to_the_block():
    # No rack holds 9, block b2 (10 free) does; b1 (8 free) could not.
    assert place(RACKS, ps(9, 1, preferred(RACK))) == {"x5": 1, "x6": 8}


def test_preferred_spreads_over_blocks_when_no_block_holds_all():
    # 11 > 10 (b2): b2 first (most free), then b1 for the rest. Below the chosen blocks Kueue
    # fills the racks of both together: the 8-pod rack, then the tightest rack for 3 more.
    assert place(RACKS, ps(11, 1, preferred(RACK))) == {"x3": 2, "x4": 1, "x6": 8}


def test_preferred_larger_than_the_whole_topology_is_none():
    placement = place_pod_set(THREE, RACKS, {}, TAS, ps(19, 1, preferred(RACK)), 19)
    assert placement.assignment is None
    assert placement.reason == 'topology "default" allows to fit only 18 out of 19 pod(s)'


def test_descent_uses_as_few_hosts_as_possible_with_a_tight_last_one():
    nodes = [
        host("x1", "b1", "r1", 5),
        host("x2", "b1", "r1", 3),
        host("x3", "b1", "r1", 2),
        host("x4", "b1", "r1", 1),
    ]
    # 7 pods: the 5-host first (most free), then the tightest host for the last 2.
    assert place(nodes, ps(7, 1, required(RACK))) == {"x1": 5, "x3": 2}
    assert place(nodes, ps(3, 1, required(RACK))) == {"x2": 3}


def test_equal_domains_are_taken_in_label_order():
    nodes = [host(f"x{i}", "b1", f"r{i}", 2) for i in (3, 1, 2)]
    assert place(nodes, ps(2, 1, required(RACK))) == {"x1": 2}


# -- unconstrained: LeastFreeCapacity (kueue-semantics §11, TASProfileMixed) ------------------


def test_unconstrained_packs_the_least_free_host_that_fits():
    assert place(RACKS, ps(2, 1, UNCONSTRAINED_REQUEST)) == {"x3": 2}
    assert place(RACKS, ps(1, 1, UNCONSTRAINED_REQUEST)) == {"x2": 1}


def test_unconstrained_too_big_for_one_host_fills_least_free_hosts_first():
    nodes = [host("x1", "b1", "r1", 4), host("x2", "b1", "r2", 1), host("x3", "b2", "r1", 2)]
    assert place(nodes, ps(5, 1, UNCONSTRAINED_REQUEST)) == {"x1": 2, "x2": 1, "x3": 2}


def test_pod_set_without_request_is_placed_unconstrained_when_implied():
    assert place(RACKS, ps(2, 1)) == {"x3": 2}


# Kueue tas_cache_test.go `defaultNodes`: b1: r1{x3}, r2{x5, x1, x6}; b2: r1{x2}, r2{x4: 2 cpu}.
KUEUE_NODES = [
    host("x3", "b1", "r1"),
    host("x5", "b1", "r2"),
    host("x1", "b1", "r2"),
    host("x6", "b1", "r2"),
    host("x2", "b2", "r1"),
    host("x4", "b2", "r2", 2, pods=40),
]
RACK_LEAVES = Topology("default", (BLOCK, RACK))


@pytest.mark.parametrize(
    ("topology", "count", "request_", "expected"),
    [
        # LeastFreeCapacity ties broken by the whole label path: (b1, r1, x3) first.
        (THREE, 1, UNCONSTRAINED_REQUEST, {"x3": 1}),
        (RACK_LEAVES, 6, preferred(RACK), {"b1/r1": 1, "b1/r2": 3, "b2/r2": 2}),
        (RACK_LEAVES, 6, preferred(BLOCK), {"b1/r1": 1, "b1/r2": 3, "b2/r2": 2}),
        (RACK_LEAVES, 10, preferred(BLOCK), None),
    ],
)
def test_placements_match_kueues_own_cases_on_its_default_nodes(
    topology, count, request_, expected
):
    assert place(KUEUE_NODES, ps(count, 1, request_), topology=topology) == expected


# -- slices (kueue-semantics §11) -------------------------------------------------------------

#        b1                      b2
#    r1          r2               r1
#  x3 x5      x1 x6 x2          x4 x7      (1 cpu each)
SLICE_NODES = [
    host("x3", "b1", "r1"),
    host("x5", "b1", "r1"),
    host("x1", "b1", "r2"),
    host("x6", "b1", "r2"),
    host("x2", "b1", "r2"),
    host("x4", "b2", "r1"),
    host("x7", "b2", "r1"),
]


def test_slices_stay_whole_inside_racks_of_the_required_block():
    request = required(BLOCK, slice_level=RACK, slice_size=2)
    # b1 holds 2 slices of 2 (r1: 1, r2: 1 of its 3 hosts), b2 only 1. Below the slice level
    # Kueue fills the least free children first, in label order.
    assert place(SLICE_NODES, ps(4, 1, request)) == {"x1": 1, "x2": 1, "x3": 1, "x5": 1}
    assert place(SLICE_NODES, ps(6, 1, request)) is None
    assert place(SLICE_NODES, ps(6, 1, preferred(BLOCK, slice_level=RACK, slice_size=2)))


def test_slice_only_request_is_placed_unconstrained():
    request = TopologyRequest(slice_level=RACK, slice_size=2)
    # The least free block that holds both slices is b1 (4 slice-pods vs b2's 2 pods).
    assert place(SLICE_NODES, ps(4, 1, request)) == {"x1": 1, "x2": 1, "x3": 1, "x5": 1}
    assert place(SLICE_NODES, ps(2, 1, request)) == {"x4": 1, "x7": 1}


def test_preferred_block_with_rack_slices_spreads_slices_over_blocks():
    nodes = [
        host("x3", "b1", "r1"),
        host("x5", "b1", "r2"),
        host("x1", "b1", "r2"),
        host("x6", "b1", "r2"),
        host("x2", "b2", "r1"),
        host("x4", "b2", "r2", 2),
    ]
    request = preferred(BLOCK, slice_level=RACK, slice_size=2)
    assert place(nodes, ps(4, 1, request)) == {"x1": 1, "x5": 1, "x4": 2}


@pytest.mark.parametrize(
    ("cpus", "count", "request_", "expected"),
    [
        # Cases of Kueue's tas_cache_test.go ("... host required for slices ..."): hosts are
        # (block, rack, name) with 1-cpu pods, in slices of 2 (3 in the last case) per host.
        ({"x3": 3, "x5": 3, "x1": 3}, 6, "required", {"x1": 2, "x3": 2, "x5": 2}),
        ({"x3": 6, "x5": 5, "x1": 4, "x6": 2}, 12, "required", {"x1": 4, "x3": 6, "x6": 2}),
        ({"x3": 3, "x5": 2, "x1": 2}, 4, "required", {"x1": 2, "x5": 2}),
        ({"x3": 4, "x5": 3, "x1": 2}, 6, "required", {"x1": 2, "x3": 4}),
        ({"x3": 3, "x5": 3, "x1": 3, "b2/x6": 6}, 12, "preferred", {"x1": 3, "x3": 3, "x6": 6}),
    ],
)
def test_host_slices_are_placed_as_in_kueues_own_cases(cpus, count, request_, expected):
    nodes = [
        host(name.split("/")[-1], "b2" if "/" in name else "b1", "r1", cpu)
        for name, cpu in cpus.items()
    ]
    size = 3 if request_ == "preferred" else 2
    request = TopologyRequest(slice_level=HOSTNAME, slice_size=size, **{request_: BLOCK})
    assert place(nodes, ps(count, 1, request)) == expected


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (
            required(HOSTNAME, slice_level=RACK, slice_size=1),
            f"podset slice topology {RACK} is above the podset topology {HOSTNAME}",
        ),
        (
            required(BLOCK, slice_level=RACK),
            "slice topology requested, but slice size not provided",
        ),
        (required("zone"), "no requested topology level: zone"),
        (
            required(BLOCK, slice_level="zone", slice_size=1),
            "no requested topology level for slices: zone",
        ),
        (
            required(BLOCK, slice_level=RACK, slice_size=3),
            "pod count 4 is not a multiple of the slice size 3",
        ),
    ],
)
def test_invalid_slice_requests_place_nothing(request_, reason):
    placement = place_pod_set(THREE, SLICE_NODES, {}, TAS, ps(4, 1, request_), 4)
    assert (placement.assignment, placement.reason) == (None, reason)


def test_zero_pods_get_an_empty_assignment():
    found = find_assignment(THREE, SLICE_NODES, {}, TAS, ps(0, 1, required(RACK)), 0)
    assert found == TopologyAssignment((HOSTNAME,), ())


# -- Kueue's perf TAS suite shape: block x racks x 96-cpu hosts (kueue-semantics §11) ---------


def test_rack_workloads_pack_racks_as_kueue_perf_tas_suite_submits_them():
    # test/performance/scheduler/configs/tas: 1 block x 10 racks x 64 hosts of 96 cpu; here
    # 4 racks x 8 hosts. Workloads are admitted in turn, each seeing what the others took.
    nodes = [
        host(f"r{r}-h{h}", "block-0", f"rack-{r}", 96, pods=110) for r in range(4) for h in range(8)
    ]
    used: dict[str, dict[str, int]] = {}

    def admit(pod_set: PodSet) -> dict[str, int] | None:
        nonlocal used
        found = find_assignment(THREE, nodes, used, TAS, pod_set, pod_set.count)
        if found is None:
            return None
        used = add_usage(used, node_usage(found, pod_set, nodes))
        return {"/".join(d.values): d.count for d in found.domains}

    small = ps(2, 0.5, required(RACK))
    assert admit(small) == {"r0-h0": 2}
    assert admit(small) == {"r0-h0": 2}  # the tightest rack is now the one in use
    whole_rack = ps(8, 96, required(RACK))
    assert admit(whole_rack) == {f"r1-h{h}": 1 for h in range(8)}  # r0 no longer holds it
    big = ps(16, 96, preferred(RACK))
    assert admit(big) == {f"r{r}-h{h}": 1 for r in (2, 3) for h in range(8)}
    assert admit(ps(8, 96, required(RACK))) is None  # 7 free hosts in r0 only
    assert admit(ps(7, 96, required(RACK))) == {f"r0-h{h}": 1 for h in range(1, 8)}


# -- GKE TPU7x dynamic slicing (seeds §B.3-B.4, §D.1) -----------------------------------------

TPU = "google.com/tpu"
SLICE_LEVELS = (
    "cloud.google.com/gce-topology-block",
    partition_id_label("4x4x4"),
    partition_id_label("2x4x4"),
    partition_id_label("2x2x4"),
    partition_id_label("2x2x2"),
    partition_id_label("2x2x1"),
    HOSTNAME,
)
SLICE_TOPOLOGY = Topology("slice-topology", SLICE_LEVELS)
SLICE_RF = ResourceFlavor(
    "slice-rf", {"cloud.google.com/gke-tpu-accelerator": "tpu7x"}, topology_name="slice-topology"
)
TPU_TOLERATION = Toleration(TPU, "Exists", effect="NoSchedule")


def tpu_nodes() -> list[Node]:
    """Two tpu7x 4x4x4 pools in block-0: 32 hosts of 4 chips, labelled as GKE does."""
    templates = [
        t
        for pool in ("tpu7-pool-1", "tpu7-pool-2")
        for t in node_templates(
            cluster="qwen-serving-cluster",
            pool=pool,
            machine_type="tpu7x-standard-4t",
            nodes=16,
            tpu_topology="4x4x4",
            block="block-0",
        )
    ]
    return [
        Node(
            t.name,
            dict(t.labels),
            tuple(Taint(x.key, x.value, x.effect) for x in t.taints),
            dict(t.allocatable),
        )
        for t in templates
    ]


def tpu_pod_set(count: int, slice_shape: str, slice_size: int) -> PodSet:
    """What the slice controller's webhook makes of a JobSet of `count` 4-chip pods."""
    request = TopologyRequest(
        required=SLICE_LEVELS[0], slice_level=partition_id_label(slice_shape), slice_size=slice_size
    )
    return PodSet(
        "job-jax",
        count,
        {TPU: 4000},
        {"cloud.google.com/gke-tpu-accelerator": "tpu7x"},
        tolerations=(TPU_TOLERATION,),
        topology_request=request,
    )


SUB_SLICE = tpu_pod_set(12, "2x2x2", 2)
SUPER_SLICE = tpu_pod_set(32, "4x4x4", 16)


def tpu_place(pod_set: PodSet, nodes: list[Node], used: Usage | None = None) -> Counter[str]:
    """Pods per host name, or an empty Counter when there is no fit."""
    found = find_assignment(SLICE_TOPOLOGY, nodes, used or {}, SLICE_RF, pod_set, pod_set.count)
    if found is None:
        return Counter()
    assert found.levels == (HOSTNAME,)
    return Counter({d.values[0]: d.count for d in found.domains})


def by_label(nodes: list[Node], hosts: Iterable[str], label: str) -> Counter[str]:
    labels = {n.name: n.labels[label] for n in nodes}
    return Counter(labels[h] for h in hosts)


def busy(nodes: Iterable[Node]) -> dict[str, dict[str, int]]:
    return {n.name: {TPU: 4000, "pods": 1000} for n in nodes}


def test_sub_slice_lands_on_six_distinct_2x2x2_partitions_two_hosts_each():
    nodes = tpu_nodes()
    placed = tpu_place(SUB_SLICE, nodes)
    assert sum(placed.values()) == 12
    assert set(placed.values()) == {1}  # one 4-chip pod per 4-chip host
    partitions = by_label(nodes, placed, partition_id_label("2x2x2"))
    assert len(partitions) == 6
    assert set(partitions.values()) == {2}
    assert len(by_label(nodes, placed, partition_id_label("4x4x4"))) == 1  # BestFit packs


def test_sub_slice_packs_into_the_cube_already_in_use():
    nodes = tpu_nodes()
    cube = partition_id_label("4x4x4")
    first = tpu_place(SUB_SLICE, nodes)
    used = busy(n for n in nodes if n.name in first)
    # 2 of the first cube's 8 partitions are left: a 2-partition job goes there, not to the
    # empty cube; a 3-partition job needs the other cube.
    second = tpu_place(tpu_pod_set(4, "2x2x2", 2), nodes, used)
    assert set(by_label(nodes, second, cube)) == set(by_label(nodes, first, cube))
    assert len(by_label(nodes, second, partition_id_label("2x2x2"))) == 2
    third = tpu_place(tpu_pod_set(6, "2x2x2", 2), nodes, used)
    assert not set(by_label(nodes, third, cube)) & set(by_label(nodes, first, cube))


def test_super_slice_takes_both_whole_cubes():
    nodes = tpu_nodes()
    placed = tpu_place(SUPER_SLICE, nodes)
    assert placed == Counter({n.name: 1 for n in nodes})
    cubes = by_label(nodes, placed, partition_id_label("4x4x4"))
    assert sorted(cubes.values()) == [16, 16]


def test_super_slice_does_not_fit_when_one_cube_is_half_used():
    nodes = tpu_nodes()
    half = partition_id_label("2x4x4")
    used = busy(n for n in nodes if n.labels[half] == "tpu7-pool-1-subblock-2x4x4-0")
    placement = place_pod_set(SLICE_TOPOLOGY, nodes, used, SLICE_RF, SUPER_SLICE, 32)
    assert placement.assignment is None
    assert placement.reason == 'topology "slice-topology" allows to fit only 1 out of 2 slice(s)'
    assert assignment_fits_empty(SLICE_TOPOLOGY, nodes, {}, SLICE_RF, SUPER_SLICE, 32)


def test_fragmented_free_capacity_places_nothing_but_fits_when_empty():
    nodes = tpu_nodes()
    # One host of every 2x2x2 partition is busy: 16 hosts are free, more than the 12 the
    # sub-slice needs, but no partition has both its hosts free.
    one_each = {}
    for n in nodes:
        one_each.setdefault(n.labels[partition_id_label("2x2x2")], n)
    used = busy(one_each.values())
    free_hosts = len(nodes) - len(used)
    assert free_hosts == 16 > SUB_SLICE.count
    placement = place_pod_set(SLICE_TOPOLOGY, nodes, used, SLICE_RF, SUB_SLICE, 12)
    assert placement.assignment is None
    assert placement.reason == 'topology "slice-topology" doesn\'t allow to fit any of 6 slice(s)'
    # The caller turns a quota Fit into Preempt: preemption can free whole partitions.
    assert assignment_fits_empty(SLICE_TOPOLOGY, nodes, {}, SLICE_RF, SUB_SLICE, 12)
    # Non-TAS usage stays when simulating an empty topology: then it never fits (NoFit).
    assert not assignment_fits_empty(SLICE_TOPOLOGY, nodes, used, SLICE_RF, SUB_SLICE, 12)


def test_tpu_taint_needs_a_toleration_from_the_pod_or_the_flavor():
    nodes = tpu_nodes()
    intolerant = replace(SUB_SLICE, tolerations=())
    assert not tpu_place(intolerant, nodes)
    flavor = replace(SLICE_RF, tolerations=(TPU_TOLERATION,))
    found = find_assignment(SLICE_TOPOLOGY, nodes, {}, flavor, intolerant, 12)
    assert found is not None
    assert found.pod_count == 12


# -- whole workloads (kueue-semantics §11) ----------------------------------------------------

TOPOLOGIES = {"default": THREE}
FLAVORS = {"tas": TAS, "plain": ResourceFlavor("plain")}


def test_later_pod_sets_see_what_earlier_ones_took():
    nodes = [host("x1", "b1", "r1", 4), host("x2", "b1", "r1", 4)]
    leader = ps(2, 1, required(HOSTNAME), name="leader")
    workers = ps(4, 1, required(HOSTNAME), name="workers")
    assignments = [PodSetAssignment("leader", {"cpu": "tas"}, 2)]
    assignments.append(PodSetAssignment("workers", {"cpu": "tas"}, 4))
    placements = place_workload([leader, workers], assignments, FLAVORS, TOPOLOGIES, nodes, {})
    assert placements["leader"].assignment == TopologyAssignment(
        (HOSTNAME,), (DomainAssignment(("x1",), 2),)
    )
    assert placements["workers"].assignment == TopologyAssignment(
        (HOSTNAME,), (DomainAssignment(("x2",), 4),)
    )


def test_only_pod_sets_asking_for_tas_are_placed_unless_the_queue_is_tas_only():
    nodes = [host("x1", "b1", "r1", 4)]
    pod_sets = [ps(1, 1, name="plain"), ps(1, 1, required(RACK), name="tas")]
    assignments = [PodSetAssignment(p.name, {"cpu": "tas"}, 1) for p in pod_sets]
    assert set(place_workload(pod_sets, assignments, FLAVORS, TOPOLOGIES, nodes, {})) == {"tas"}
    implied = place_workload(pod_sets, assignments, FLAVORS, TOPOLOGIES, nodes, {}, tas_only=True)
    assert set(implied) == {"plain", "tas"}
    assert all(p.fits for p in implied.values())
    counts = [PodSetAssignment(p.name, {"cpu": "tas"}, 0) for p in pod_sets]
    assert place_workload(pod_sets, counts, FLAVORS, TOPOLOGIES, nodes, {}, tas_only=True) == {}


def test_placement_stops_at_the_first_pod_set_that_does_not_fit():
    nodes = [host("x1", "b1", "r1", 2)]
    pod_sets = [ps(3, 1, required(RACK), name="a"), ps(1, 1, required(RACK), name="b")]
    assignments = [PodSetAssignment(p.name, {"cpu": "tas"}, p.count) for p in pod_sets]
    placements = place_workload(pod_sets, assignments, FLAVORS, TOPOLOGIES, nodes, {})
    assert list(placements) == ["a"]
    assert not placements["a"].fits


def test_pod_set_without_a_tas_flavor_cannot_be_placed():
    nodes = [host("x1", "b1", "r1", 2)]
    pod_set = ps(1, 1, required(RACK))
    assignment = PodSetAssignment("main", {"cpu": "plain"}, 1)
    placement = place_workload([pod_set], [assignment], FLAVORS, TOPOLOGIES, nodes, {})["main"]
    assert (placement.fits, placement.reason) == (False, "PodSet main: no TAS flavor assigned")
    missing = {"tas": replace(TAS, topology_name="gone")}
    assignment = PodSetAssignment("main", {"cpu": "tas"}, 1)
    placement = place_workload([pod_set], [assignment], missing, TOPOLOGIES, nodes, {})["main"]
    assert placement.reason == "topology gone not found"


# -- PodSet groups (kueue-semantics §4, §11, §14 LeaderWorkerSet) ------------------------------

#      b1
#  r1        r2
#  x1:1 x2:1 x3:1 x4:1 x5:1
GROUP_RACKS = [
    host("x1", "b1", "r1"),
    host("x2", "b1", "r1"),
    host("x3", "b1", "r2"),
    host("x4", "b1", "r2"),
    host("x5", "b1", "r2"),
]


def leader_and_workers(workers: int, group: str | None = "lws", level: str = RACK):
    request = required(level, group=group)
    pod_sets = [ps(1, 1, request, name="leader"), ps(workers, 1, request, name="worker")]
    assignments = [PodSetAssignment(p.name, {"cpu": "tas"}, p.count) for p in pod_sets]
    return pod_sets, assignments


def hosts_of(placements) -> dict[str, dict[str, int]]:
    return {
        name: {d.values[0]: d.count for d in p.assignment.domains} for name, p in placements.items()
    }


def test_group_fits_only_when_its_domain_holds_leader_and_workers():
    # Apart, the leader takes the tightest rack (r1) and the two workers the other one; as a
    # group the three pods need one rack, and only r2 holds three.
    alone = place_workload(*leader_and_workers(2, group=None), FLAVORS, TOPOLOGIES, GROUP_RACKS, {})
    assert hosts_of(alone) == {"leader": {"x1": 1}, "worker": {"x3": 1, "x4": 1}}
    together = place_workload(*leader_and_workers(2), FLAVORS, TOPOLOGIES, GROUP_RACKS, {})
    assert hosts_of(together) == {"leader": {"x3": 1}, "worker": {"x4": 1, "x5": 1}}


def test_group_is_never_split_across_domains():
    pod_sets, assignments = leader_and_workers(3)
    placements = place_workload(pod_sets, assignments, FLAVORS, TOPOLOGIES, GROUP_RACKS, {})
    assert list(placements) == ["leader", "worker"]
    assert not any(p.fits for p in placements.values())
    assert placements["worker"].reason == (
        'topology "default" allows to fit only 3 out of 4 pod(s)'
    )
    alone = place_workload(*leader_and_workers(3, group=None), FLAVORS, TOPOLOGIES, GROUP_RACKS, {})
    assert all(p.fits for p in alone.values())  # apart, leader and workers use both racks


def test_group_sizes_every_pod_for_the_larger_request_and_charges_each_its_own():
    pod_sets, assignments = leader_and_workers(1, level=HOSTNAME)
    pod_sets[0] = replace(pod_sets[0], requests={"cpu": 2 * CPU})
    nodes = [host("x1", "b1", "r1", 3), host("x2", "b1", "r1", 4)]
    placements = place_workload(pod_sets, assignments, FLAVORS, TOPOLOGIES, nodes, {})
    assert hosts_of(placements) == {"leader": {"x2": 1}, "worker": {"x2": 1}}
    used = add_usage(*(node_usage(placements[p.name].assignment, p, nodes) for p in pod_sets))
    assert used == {"x2": {"cpu": 3 * CPU, "pods": 2000}}


def test_group_needs_one_tas_flavor_and_a_leader_of_one_pod():
    pod_sets, assignments = leader_and_workers(2)
    other = {**FLAVORS, "tas2": replace(TAS, name="tas2")}
    assignments[1] = replace(assignments[1], flavors={"cpu": "tas2"})
    placements = place_workload(pod_sets, assignments, other, TOPOLOGIES, GROUP_RACKS, {})
    assert placements["leader"].reason == "PodSet group lws: different TAS flavors ['tas', 'tas2']"
    pod_sets, assignments = leader_and_workers(2)
    assignments[0] = replace(assignments[0], count=2)
    placements = place_workload(pod_sets, assignments, FLAVORS, TOPOLOGIES, GROUP_RACKS, {})
    assert placements["worker"].reason == (
        "PodSet group lws: needs one leader pod and one workers PodSet"
    )


def test_flavor_eligibility_follows_kueue():
    plain = ResourceFlavor("plain")
    tas_pod_set, pod_set = ps(1, 1, required(RACK)), ps(1, 1)
    assert flavor_mismatch(tas_pod_set, TAS, THREE, False) is None
    assert flavor_mismatch(pod_set, TAS, THREE, False) == (
        'Flavor "tas" supports only TopologyAwareScheduling'
    )
    assert flavor_mismatch(pod_set, TAS, THREE, True) is None  # implied
    assert flavor_mismatch(tas_pod_set, plain, None, False, ["cpu"]) == (
        'Flavor "plain" does not support TopologyAwareScheduling'
    )
    assert flavor_mismatch(tas_pod_set, plain, None, False, ["memory"]) is None
    assert flavor_mismatch(tas_pod_set, TAS, None, False) == (
        'Flavor "tas" information missing in TAS cache'
    )
    zone = ps(1, 1, required("zone"))
    assert flavor_mismatch(zone, TAS, THREE, False) == (
        'Flavor "tas" does not contain the requested level'
    )


def test_a_queue_is_tas_only_when_every_flavor_has_a_known_topology():
    assert is_tas_only(cq("q", {"tas": {"cpu": 8 * CPU}}), FLAVORS, TOPOLOGIES)
    assert not is_tas_only(cq("q", {"tas": {"cpu": 1}, "plain": {"cpu": 1}}), FLAVORS, TOPOLOGIES)
    assert not is_tas_only(cq("q", {"tas": {"cpu": 1}}), FLAVORS, {})
    assert not is_tas_only(cq("q", {"other": {"cpu": 1}}), FLAVORS, TOPOLOGIES)


def test_every_resource_of_a_tas_pod_set_is_contested():
    pod_sets = [ps(1, 1, name="plain"), ps(1, 1, required(RACK), name="tas")]
    assignments = [
        PodSetAssignment("plain", {"cpu": "plain"}, 1),
        PodSetAssignment("tas", {"cpu": "tas", "memory": "plain"}, 1),
    ]
    assert topology_frs(pod_sets, assignments) == {("tas", "cpu"), ("plain", "memory")}
    assert ("plain", "cpu") in topology_frs(pod_sets, assignments, tas_only=True)


def test_node_usage_charges_requests_and_one_pod_each():
    nodes = [host("x1", "b1", "r1", 4), host("x2", "b1", "r1", 4)]
    assignment = TopologyAssignment(
        (HOSTNAME,), (DomainAssignment(("x1",), 3), DomainAssignment(("gone",), 1))
    )
    usage = node_usage(assignment, ps(4, 0.5), nodes)
    assert usage == {"x1": {"cpu": 1500, "pods": 3000}}
    racks = TopologyAssignment((BLOCK, RACK), (DomainAssignment(("b1", "r1"), 2),))
    assert node_usage(racks, ps(2, 1), nodes) == {"x1": {"cpu": 2000, "pods": 2000}}


def on_hosts(**counts: int) -> TopologyAssignment:
    return TopologyAssignment(
        (HOSTNAME,), tuple(DomainAssignment((h,), c) for h, c in sorted(counts.items()))
    )


def test_an_assignment_fits_until_others_take_its_room():
    nodes = [host("x1", "b1", "r1", 4), host("x2", "b1", "r1", 4, ready=False)]
    pod_set = ps(2, 1, required(HOSTNAME))
    assert assignment_fits(on_hosts(x1=2), pod_set, nodes, {}, TAS)
    assert assignment_fits(on_hosts(x1=2), pod_set, nodes, {"x1": {"cpu": 2000}}, TAS)
    assert not assignment_fits(on_hosts(x1=2), pod_set, nodes, {"x1": {"cpu": 3000}}, TAS)
    assert not assignment_fits(on_hosts(x2=1), pod_set, nodes, {}, TAS)  # not Ready
    assert not assignment_fits(on_hosts(x9=1), pod_set, nodes, {}, TAS)  # gone


def test_pod_sets_of_one_workload_must_fit_together():
    nodes = [host("x1", "b1", "r1", 4)]
    pod_sets = [ps(2, 1, required(HOSTNAME), name="a"), ps(2, 1, required(HOSTNAME), name="b")]
    assignments = [
        PodSetAssignment("a", {"cpu": "tas"}, 2, on_hosts(x1=2)),
        PodSetAssignment("b", {"cpu": "tas"}, 2, on_hosts(x1=2)),
    ]
    assert placements_fit(pod_sets, assignments, FLAVORS, nodes, {})
    assert not placements_fit(pod_sets, assignments, FLAVORS, nodes, {"x1": {"cpu": 1000}})
    untouched = [replace(a, topology_assignment=None) for a in assignments]
    assert placements_fit(pod_sets, untouched, FLAVORS, nodes, {"x1": {"cpu": 4000}})


def test_topology_usage_holds_and_releases_by_workload():
    usage = TopologyUsage({"x1": {"cpu": 1000}})
    usage.hold("w1", {"x1": {"cpu": 2000}, "x2": {"cpu": 1000}})
    assert usage.used() == {"x1": {"cpu": 3000}, "x2": {"cpu": 1000}}
    usage.release("w1")
    usage.release("unknown")
    assert usage.used() == {"x1": {"cpu": 1000}}
    assert usage.non_tas == {"x1": {"cpu": 1000}}
