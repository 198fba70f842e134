"""`scheduler.explain_pending` / `held_quota`: the numbers explain shows, from the quota tree and
the same nomination a scheduling cycle makes (Kueue `pkg/scheduler/scheduler.go`
getInitialAssignments, `pkg/cache/scheduler` resource_node.go available/potentialAvailable)."""

from __future__ import annotations

from scheduler import CohortQuota, PendingReason, PreemptionReason, explain_pending, held_quota
from tests.unit.scheduler.builders import (
    GPU,
    LOWER,
    admitted,
    cq,
    gpu_cq,
    pod_set,
    quota,
    snapshot,
    wl,
)


def test_pending_workload_sees_what_its_cohort_would_lend_and_who_holds_it():
    """team-a has 4 GPUs of its own, 2 used; team-b lends 4 of its 6 (lendingLimit) and uses 3,
    one of them out of what it lends: the cohort's 8 lendable less 2 + 1 leaves 5 available,
    3 of them borrowable, to a 6-GPU request, which does not fit."""
    a = cq("team-a", {"default": {"gpu": 4 * GPU}}, cohort="org", within=LOWER)
    b = cq("team-b", {"default": {"gpu": quota(6 * GPU, lend=4 * GPU)}}, cohort="org")
    snap = snapshot(
        [a, b],
        [
            admitted("a/low", "team-a", 2, priority=-1),
            admitted("b/three", "team-b", 3),
            wl("a/big", "team-a", 6),
        ],
    )
    found = explain_pending(snap, snap.workloads[-1])
    (line,) = found.quota
    assert (line.flavor, line.resource, line.requested) == ("default", "gpu", 6 * GPU)
    assert (line.nominal, line.used, line.available) == (4 * GPU, 2 * GPU, 5 * GPU)
    assert (line.borrowable, line.lendable, line.fits) == (3 * GPU, 4 * GPU, False)
    assert line.max_available == 8 * GPU  # its own 4 plus all team-b may lend
    assert line.cohorts == (CohortQuota("org", 8 * GPU, 3 * GPU, 5 * GPU),)
    # It would borrow, and it may preempt only within its queue without borrowing: no
    # candidates, waiting for quota (Kueue flavorassigner `fitsResourceQuota`).
    verdict = found.flavors
    assert (verdict.mode, verdict.reason, verdict.victims) == (
        "NoFit",
        PendingReason.WAITING_FOR_QUOTA,
        (),
    )
    assert verdict.messages == (
        "insufficient unused quota for gpu in flavor default, 1000 more needed (milli-units)",
    )
    assert [(h.workload, dict(h.holds)) for h in found.holders] == [
        ("a/low", {("default", "gpu"): 2 * GPU}),
        ("b/three", {("default", "gpu"): 3 * GPU}),
    ]


def test_victims_are_the_ones_a_cycle_would_preempt():
    snap = snapshot(
        [gpu_cq("solo", 4, within=LOWER)],
        [admitted("x/low", "solo", 3, priority=-1), wl("x/high", "solo", 2, priority=5)],
    )
    found = explain_pending(snap, snap.workloads[-1])
    assert found.flavors.mode == "Preempt"
    assert [(v.workload, v.reason) for v in found.flavors.victims] == [
        ("x/low", PreemptionReason.IN_CLUSTER_QUEUE)
    ]
    assert [(h.workload, h.would_be_preempted) for h in found.holders] == [("x/low", True)]


def test_a_fitting_workload_has_no_holders_and_no_fit_has_its_reason():
    snap = snapshot([gpu_cq("solo", 4)], [wl("x/fits", "solo", 2), wl("x/never", "solo", 9)])
    fits = explain_pending(snap, snap.workloads[0])
    assert (fits.flavors.mode, fits.flavors.fits, fits.holders) == ("Fit", True, ())
    never = explain_pending(snap, snap.workloads[1])
    assert never.flavors.mode == "NoFit"
    assert never.flavors.reason is PendingReason.EXCEEDS_MAX_QUOTA


def test_pods_count_one_per_pod_only_where_the_queue_covers_them():
    """Kueue `flavorassigner.assignFlavors` sets a PodSet's `pods` request to its count."""
    covers = cq("pods", {"default": {"gpu": 8 * GPU, "pods": 4 * 1000}})
    snap = snapshot([covers], [wl("x/w", "pods", pod_sets=[pod_set(1, 3)])])
    found = explain_pending(snap, snap.workloads[0])
    assert {line.resource: line.requested for line in found.quota} == {
        "gpu": 3 * GPU,
        "pods": 3 * 1000,
    }


def test_held_quota_includes_the_workloads_own_usage():
    snap = snapshot([gpu_cq("solo", 4)], [admitted("x/run", "solo", 3)])
    (line,) = held_quota(snap, snap.workloads[0])
    assert (line.requested, line.used, line.available, line.fits) == (
        3 * GPU,
        3 * GPU,
        1 * GPU,
        True,
    )
