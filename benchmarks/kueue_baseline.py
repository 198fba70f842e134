"""Kueue's baseline scheduler performance suite (kueue-perf.md §1a), in virtual time.

5 cohorts x 6 ClusterQueues (nominal 20 cpu, borrowingLimit 100, reclaimWithinCohort Any,
withinClusterQueue LowerPriority); per ClusterQueue 350 small (1 cpu, priority 50, every
100 ms, runs 200 ms), 100 medium (5 cpu, 100, every 500 ms, 500 ms) and 50 large (20 cpu,
200, every 1200 ms, 1000 ms): 15,000 single-pod Jobs, run as `perfsuite` describes. Prints
wall time, admissions per second, each class's mean time-to-admission and the ClusterQueue
usage beside Kueue's published figures.

    python benchmarks/kueue_baseline.py [--scale 0.2]
"""

from __future__ import annotations

from perfsuite import Suite, Variant, WorkloadClass, main

BASELINE = Suite(
    title="Kueue baseline suite",
    classes=(
        WorkloadClass("small", 100, 200, 50, 1, "1", (Variant("any", 350),), 215_468),
        WorkloadClass("medium", 500, 500, 100, 1, "5", (Variant("any", 100),), 76_768),
        WorkloadClass("large", 1200, 1000, 200, 1, "20", (Variant("any", 50),), 16_501),
    ),
    kueue_wall_ms=351_116,
    kueue_usage=55.9,
    target_wall_s=30,
)

if __name__ == "__main__":
    main(BASELINE, __doc__ or "")
