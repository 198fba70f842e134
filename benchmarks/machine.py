"""How fast this machine runs Python as a benchmark ends: one line to print beside its figures.

The machines these benchmarks run on are shared virtual machines. The same code took 26 s of
the baseline suite on one session's machine and 41 to 55 s on another's, drifting within the
hour: a figure compares with another only beside this one, measured the same way. A rough
gauge, not a correction: the work is the suites' kind (small objects made, sorted and looked
up), not their mix.
"""

from __future__ import annotations

import time

WORKLOADS = 300_000
TRIES = 3


def python_speed() -> str:
    """The CPU time of `_work`, the best of TRIES."""
    best = min(_timed() for _ in range(TRIES))
    return (
        f"machine: {WORKLOADS:,} workload-like dicts made, sorted and looked up in {best:.2f} s "
        f"of CPU (best of {TRIES}); compare figures from machines that took about as long"
    )


def _timed() -> float:
    started = time.process_time()
    _work()
    return time.process_time() - started


def _work() -> int:
    rows = [
        {"name": f"w-{i}", "priority": i % 7, "cpu": i % 13, "pods": [i, i + 1]}
        for i in range(WORKLOADS)
    ]
    rows.sort(key=lambda row: (-row["priority"], row["name"]))
    by_name = {row["name"]: row for row in rows}
    return sum(by_name[f"w-{i}"]["cpu"] for i in range(0, WORKLOADS, 3))
