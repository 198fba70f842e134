"""`make run`'s launcher restarts a process that exits, backing off while it keeps crashing,
and gives up on one that crash-loops (controlplane/run.py)."""

from __future__ import annotations

import logging
import sys

import pytest

from controlplane.run import MAX_QUICK_CRASHES, STABLE_SECONDS, Child

CRASHES = [sys.executable, "-c", "raise SystemExit(3)"]


def crash_and_check(child: Child, now: float) -> bool:
    child.process.wait()
    return child.check(now)


def test_a_crashing_process_is_restarted_with_growing_delays_then_given_up(caplog):
    caplog.set_level(logging.INFO, logger="controlplane.run")
    child = Child("worker-0", CRASHES)
    now = child.started
    delays = []
    pids = {child.process.pid}

    for _ in range(MAX_QUICK_CRASHES):
        assert crash_and_check(child, now)
        delays.append(child.restart_at - now)
        assert child.check(child.restart_at - 0.1)  # not yet
        now = child.restart_at
        assert child.check(now)  # started again
        pids.add(child.process.pid)

    # Clock readings are floats: a delay added to one and taken away again may be off by ulps.
    assert delays == pytest.approx([1, 2, 4, 8, 16])
    assert len(pids) == MAX_QUICK_CRASHES + 1
    assert not crash_and_check(child, now)  # one crash too many in a row: give up
    assert "worker-0 exited with 3 after 0 s; restarting it in 1 s" in caplog.text
    assert f"exited with 3 {MAX_QUICK_CRASHES + 1} times in a row; giving up" in caplog.text


def test_a_process_that_ran_a_while_is_restarted_after_a_second_again():
    child = Child("web-8000", CRASHES)
    for _ in range(3):
        now = child.started
        assert crash_and_check(child, now)
        now = child.restart_at
        assert child.check(now)

    assert crash_and_check(child, child.started + STABLE_SECONDS + 1)
    assert child.restart_at - (child.started + STABLE_SECONDS + 1) == pytest.approx(1)
