"""`flavorFungibility.preference`: which of two imperfect flavors a workload takes.

Follows Kueue `pkg/scheduler/flavorassigner/flavorassigner.go` isPreferred: NoFit is worst,
a flavor whose preemption finds no candidates ranks below any viable one, then
BorrowingOverPreemption (the default) compares the preemption mode before the borrowing
level and PreemptionOverBorrowing the borrowing level before the preemption mode. Cases
from `flavorassigner_test.go` TestIsPreferred and TestHierarchical, and `scheduler_test.go`
TestSchedule ("... preference: ...").
"""

from __future__ import annotations

import pytest

from scheduler import FungibilityPreference
from scheduler.flavors import Granular, Mode, is_preferred
from tests.unit.scheduler.builders import (
    CPU,
    LOWER,
    TRY_NEXT,
    admitted,
    cohort,
    cq,
    quota,
    run,
    wl,
)

BOP = FungibilityPreference.BORROWING_OVER_PREEMPTION
POB = FungibilityPreference.PREEMPTION_OVER_BORROWING


@pytest.mark.parametrize(
    ("a", "b", "preference", "preferred"),
    [
        # TestIsPreferred: feature gate disabled prioritises preemption (no preference: the default)
        (Granular(Mode.FIT, 0), Granular(Mode.PREEMPT, 0), None, True),
        # TestIsPreferred: explicit BorrowingOverPreemption prioritises borrowing distance
        (Granular(Mode.PREEMPT, 1), Granular(Mode.FIT, 2), BOP, False),
        # TestIsPreferred: explicit PreemptionOverBorrowing prioritises lower preemption
        (Granular(Mode.PREEMPT, 1), Granular(Mode.FIT, 2), POB, True),
        # TestIsPreferred: explicit PreemptionOverBorrowing breaks borrowing ties with preemption
        (Granular(Mode.PREEMPT, 1), Granular(Mode.FIT, 1), POB, False),
        # TestIsPreferred: PreemptionOverBorrowing rejects no-candidate flavor before borrowing
        (Granular(Mode.NO_CANDIDATES, 1), Granular(Mode.FIT, 2), POB, False),
        # TestIsPreferred: PreemptionOverBorrowing prefers fit over shallower-borrowing no-candidate
        (Granular(Mode.FIT, 2), Granular(Mode.NO_CANDIDATES, 1), POB, True),
        # TestIsPreferred: no-candidate flavor remains preferable to no-fit flavor
        (Granular(Mode.NO_CANDIDATES, 1), Granular(Mode.NO_FIT, 0), None, True),
        # TestIsPreferred: no-fit flavor remains worse than no-candidate flavor
        (Granular(Mode.NO_FIT, 0), Granular(Mode.NO_CANDIDATES, 1), None, False),
        # TestIsPreferred: no-candidate flavors retain borrowing preference (and in reverse)
        (Granular(Mode.NO_CANDIDATES, 1), Granular(Mode.NO_CANDIDATES, 2), POB, True),
        (Granular(Mode.NO_CANDIDATES, 2), Granular(Mode.NO_CANDIDATES, 1), POB, False),
        # BorrowingOverPreemption: reclaiming beats preempting in the ClusterQueue
        (Granular(Mode.RECLAIM, 2), Granular(Mode.PREEMPT, 0), BOP, True),
        (Granular(Mode.RECLAIM, 2), Granular(Mode.PREEMPT, 0), POB, False),
    ],
)
def test_is_preferred(a, b, preference, preferred):
    assert is_preferred(a, b, preference) is preferred


def _on_demand_or_spot(preference: FungibilityPreference | None):
    """scheduler_test.go "pob-cq"/"bop-cq": 5 CPU on-demand held by a lower priority
    workload; spot only by borrowing the lender's 5."""
    queue = cq(
        "q",
        {"on-demand": {"cpu": quota(5 * CPU, borrow=0)}, "spot": {"cpu": quota(0, borrow=5 * CPU)}},
        cohort="c",
        within=LOWER,
        when_can_borrow=TRY_NEXT,
        when_can_preempt=TRY_NEXT,
        preference=preference,
    )
    lender = cq("lender", {"on-demand": {"cpu": 0}, "spot": {"cpu": 5 * CPU}}, cohort="c")
    low = admitted("low", "q", flavor="on-demand", priority=-1, requests={"cpu": 5 * CPU})
    high = wl("high", "q", requests={"cpu": 5 * CPU})
    return run([queue, lender], [low, high])


def test_preemption_over_borrowing_preempts_in_the_first_flavor():
    """TestSchedule "PreemptionOverBorrowing preference: preempt in first flavor instead of
    borrowing in second"."""
    result = _on_demand_or_spot(POB)
    assert result.preemptors == {"high": {"low"}}
    assert result.admitted == []


@pytest.mark.parametrize("preference", [BOP, None])
def test_borrowing_over_preemption_borrows_in_the_second_flavor(preference):
    """TestSchedule "BorrowingOverPreemption preference: borrow in second flavor instead of
    preempting in first"; BorrowingOverPreemption is also what no preference means."""
    result = _on_demand_or_spot(preference)
    assert result.victims == {}
    assert result.flavor("high", "cpu") == "spot"
    assert result.borrowing("high") is True


def test_preemption_over_borrowing_skips_a_flavor_without_preemption_candidates():
    """TestSchedule "PreemptionOverBorrowing preference: select fitting second flavor over
    first flavor with no preemption candidates": on-demand is reachable one cohort level
    lower than spot, but nothing there can be preempted, so spot is taken."""
    queue = cq(
        "q",
        {"on-demand": {"cpu": quota(5 * CPU, borrow=0)}, "spot": {"cpu": 0}},
        cohort="mid",
        within=LOWER,
        when_can_borrow=TRY_NEXT,
        when_can_preempt=TRY_NEXT,
        preference=POB,
    )
    sibling = cq("sibling", {"on-demand": {"cpu": 5 * CPU}, "spot": {"cpu": 0}}, cohort="mid")
    cohorts = [
        cohort("root", flavors={"on-demand": {"cpu": 0}, "spot": {"cpu": 5 * CPU}}),
        cohort("mid", "root"),
    ]
    held = admitted("held", "q", flavor="on-demand", requests={"cpu": 5 * CPU})
    result = run(
        [queue, sibling], [held, wl("pending", "q", requests={"cpu": 5 * CPU})], cohorts=cohorts
    )
    assert result.victims == {}
    assert result.flavor("pending", "cpu") == "spot"
