"""Times the pure scheduler: 10,000 pending workloads over 100 ClusterQueues in 10 cohorts.

Prints decisions per second for a cold schedule() over the whole backlog, once where
everything admitted so far leaves room (no preemption) and once where the queues are full of
low-priority work that high-priority arrivals must preempt.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scheduler as s  # noqa: E402

COHORTS, QUEUES_PER_COHORT, PENDING = 10, 10, 10_000
CPU = 1000  # one core in milli-units


def cluster_queues() -> dict[str, s.ClusterQueue]:
    queues = {}
    for c in range(COHORTS):
        for q in range(QUEUES_PER_COHORT):
            name = f"cq-{c}-{q}"
            quota = s.ResourceQuota(nominal=100 * CPU, borrowing_limit=50 * CPU)
            queues[name] = s.ClusterQueue(
                name=name,
                cohort=f"cohort-{c}",
                resource_groups=(
                    s.ResourceGroup(("cpu",), (s.FlavorQuotas("default", {"cpu": quota}),)),
                ),
                preemption=s.Preemption(
                    within_cluster_queue=s.PreemptionPolicy.LOWER_PRIORITY,
                    reclaim_within_cohort=s.PreemptionPolicy.ANY,
                ),
            )
    return queues


def workload(
    key: str, cq: str, priority: int, created: float, cpus: int, admitted: bool = False
) -> s.Workload:
    pod_sets = (s.PodSet("main", 1, {"cpu": cpus * CPU}),)
    admission = (
        s.Admission(cq, (s.PodSetAssignment("main", {"cpu": "default"}, 1),)) if admitted else None
    )
    return s.Workload(
        key,
        cq,
        priority,
        created,
        pod_sets,
        admission=admission,
        quota_reserved_at=created if admitted else None,
    )


def run(label: str, workloads: tuple[s.Workload, ...], queues: dict[str, s.ClusterQueue]) -> None:
    snapshot = s.Snapshot(queues, {}, {"default": s.ResourceFlavor("default")}, workloads)
    started = time.perf_counter()
    decisions = s.schedule(snapshot)
    elapsed = time.perf_counter() - started
    count = len(decisions.admitted) + len(decisions.preemptions) + len(decisions.pending)
    print(
        f"{label:<18} {elapsed:7.2f} s  {count / elapsed:9.0f} decisions/s  "
        f"admitted {len(decisions.admitted):5d}  preemptions {len(decisions.preemptions):5d}  "
        f"pending {len(decisions.pending):5d}  cycles {decisions.cycles}"
    )


def main() -> None:
    rng = random.Random(42)
    queues = cluster_queues()
    names = sorted(queues)
    pending = tuple(
        workload(
            f"w{i}",
            rng.choice(names),
            rng.choice((50, 100, 200)),
            float(i),
            rng.choice((1, 2, 5, 20)),
        )
        for i in range(PENDING)
    )
    print(f"scheduler: {PENDING} pending workloads, {len(queues)} ClusterQueues, {COHORTS} cohorts")
    run("no preemption", pending, queues)
    full = tuple(
        workload(f"low-{name}-{i}", name, 10, -1000.0 + i, 10, admitted=True)
        for name in names
        for i in range(10)
    )
    high = tuple(
        workload(w.key, w.cluster_queue or "", 500, w.created, 10) for w in pending[:2_000]
    )
    run("with preemption", full + high, queues)


if __name__ == "__main__":
    main()
