"""TAS balanced placement (Kueue gate TASBalancedPlacement, alpha since v0.15, off by default;
`pkg/cache/scheduler/tas_balanced_placement.go`). Every case is one of Kueue's
`tas_cache_test.go` TestFindTopologyAssignments cases named "balanced placement; ...", with
cpu in place of example.com/gpu and enough `pods` per node."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from scheduler import Node, PodSet
from scheduler.topology import HOSTNAME, TopologyRequest, place_pod_set
from tests.unit.scheduler.test_topology import (
    RACK,
    TAS,
    THREE,
    host,
    place,
    preferred,
    ps,
    required,
)


def nodes(*spec: str) -> list[Node]:
    """'b1-r1-x1:15' -> host x1 in block b1, rack r1, with 15 cpus."""
    result = []
    for item in spec:
        path, cpu = item.split(":")
        block, rack, name = path.split("-")
        result.append(host(name, block, rack, int(cpu), pods=100))
    return result


def balanced(found: Iterable[Node], pod_set: PodSet) -> dict[str, int] | None:
    placement = place_pod_set(THREE, list(found), {}, TAS, pod_set, pod_set.count, balanced=True)
    if placement.assignment is None:
        return None
    return {"/".join(d.values): d.count for d in placement.assignment.domains}


def host_slices(size: int) -> TopologyRequest:
    return preferred(RACK, slice_level=HOSTNAME, slice_size=size)


@pytest.mark.parametrize(
    ("case", "spec", "request_", "count", "want"),
    [
        ("basic", ["b1-r1-x1:15", "b1-r2-x2:15"], preferred(RACK), 25, {"x1": 13, "x2": 12}),
        (
            "select optmial set of domains",
            ["b1-r1-x1:15", "b1-r1-x2:13", "b1-r1-x3:10"],
            preferred(RACK),
            23,
            {"x1": 12, "x2": 11},
        ),
        (
            "select optmial set of domains; with slices",
            ["b1-r1-x1:20", "b1-r1-x2:15", "b1-r1-x3:10"],
            host_slices(5),
            25,
            {"x2": 15, "x3": 10},
        ),
        (
            "select correct block",
            ["b1-r1-x1:20", "b1-r1-x2:10", "b2-r2-x3:15", "b2-r2-x4:15"],
            preferred(RACK),
            22,
            {"x3": 11, "x4": 11},
        ),
        (
            "cannot chose domains from different blocks",
            ["b1-r1-x1:14", "b1-r1-x2:11", "b2-r2-x3:15", "b2-r2-x4:10"],
            preferred(RACK),
            25,
            {"x1": 14, "x2": 11},
        ),
        (
            "select correct block; prefer blocks with single rack; with slices",
            ["b1-r1-x1:15", "b1-r2-x2:15", "b1-r3-x3:15", "b1-r3-x4:15"],
            host_slices(5),
            25,
            {"x3": 15, "x4": 10},
        ),
        (
            "three level topology; balance on the same level as slice",
            ["b1-r1-x1:15", "b1-r1-x2:13", "b1-r1-x3:10", "b1-r2-x4:20", "b1-r2-x5:8"],
            preferred(HOSTNAME, slice_level=HOSTNAME, slice_size=2),
            22,
            {"x2": 12, "x3": 10},
        ),
        (
            "three level topology; balance on the lowest level",
            ["b1-r1-x1:20", "b1-r1-x2:8", "b1-r2-x3:15", "b1-r2-x4:13", "b1-r2-x5:10"],
            preferred(HOSTNAME),
            22,
            {"x3": 11, "x4": 11},
        ),
    ],
)
def test_balanced_placement_matches_kueues_cases(
    case: str, spec: list[str], request_: TopologyRequest, count: int, want: dict[str, int]
) -> None:
    """Kueue tas_cache_test.go "balanced placement; <case>"."""
    assert balanced(nodes(*spec), ps(count, 1, request_)) == want, case


def test_greedy_best_fit_packs_the_same_request_when_the_gate_is_off() -> None:
    """The gate is off by default: Kueue's BestFit fills x1 and puts the rest on x2 (the
    "basic" case above without TASBalancedPlacement)."""
    found = nodes("b1-r1-x1:15", "b1-r2-x2:15")
    assert place(found, ps(25, 1, preferred(RACK))) == {"x1": 15, "x2": 10}


def test_required_and_unconstrained_requests_are_never_balanced() -> None:
    """tas_flavor_snapshot.go findTopologyAssignment: balanced placement only for requests
    neither `required` nor unconstrained (implied and slice-only included)."""
    found = nodes("b1-r1-x1:15", "b1-r1-x2:15")
    assert balanced(found, ps(25, 1, required(RACK))) == {"x1": 15, "x2": 10}
    unconstrained = balanced(found, ps(25, 1, TopologyRequest(unconstrained=True)))
    assert unconstrained == {"x1": 15, "x2": 10}


def test_falls_back_to_best_fit_when_no_domain_above_the_preferred_level_holds_it() -> None:
    """KEP 2724 "Balanced placement" step 2: when no single block holds the request, the
    standard algorithm places it (here across both blocks)."""
    found = nodes("b1-r1-x1:15", "b2-r2-x2:15")
    assert balanced(found, ps(25, 1, preferred(RACK))) == {"x1": 15, "x2": 10}


def test_the_configuration_feature_gate_turns_it_on():
    """pkg/features/kube_features.go: TASBalancedPlacement is alpha and off unless the
    Configuration's `featureGates` enables it."""
    from tests.unit.test_wait_for_pods_ready import spec_of
    from workloads.snapshot import scheduling_config

    head = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
    assert scheduling_config(spec_of(head)).tas_balanced_placement is False
    gated = spec_of(head + "featureGates: {TASBalancedPlacement: true}\n")
    assert scheduling_config(gated).tas_balanced_placement is True
