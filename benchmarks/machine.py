"""How fast this machine runs Python as a benchmark ends: one line to print beside its figures.

The machines these benchmarks run on are shared virtual machines. The same code took 26 s of
the baseline suite on one and 41 s on another, and a machine's speed drifts within the hour:
a figure compares with another only beside this one, measured the same way.
"""

from __future__ import annotations

import time

ADDITIONS = 20_000_000
TRIES = 3


def python_speed() -> str:
    """The CPU time of a pure-Python loop of ADDITIONS additions, the best of TRIES."""
    best = min(_loop() for _ in range(TRIES))
    return (
        f"machine: a pure-Python loop of {ADDITIONS:,} additions took {best:.2f} s of CPU "
        f"(best of {TRIES}); compare figures from machines that took about as long"
    )


def _loop() -> float:
    started = time.process_time()
    total = 0
    for number in range(ADDITIONS):
        total += number
    return time.process_time() - started
