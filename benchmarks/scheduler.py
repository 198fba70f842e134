"""Times the pure scheduler: 10,000 pending workloads over 100 ClusterQueues in 10 cohorts.

Calls schedule() until nothing changes (victims stop between calls, as the admission service
makes them) and prints decisions (admit, preempt, pending reason) per second: once for a
backlog arriving at empty queues, once for high-priority arrivals at queues full of
low-priority work that they must preempt.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scheduler as s  # noqa: E402

COHORTS, QUEUES_PER_COHORT, PENDING = 10, 10, 10_000
CPU = 1000  # one core in milli-units


def cluster_queues(preempt: bool) -> dict[str, s.ClusterQueue]:
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
                )
                if preempt
                else s.Preemption(),
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
    """Schedule until nothing changes, stopping victims and admitting as the service would."""
    flavors = {"default": s.ResourceFlavor("default")}
    state = {w.key: w for w in workloads}
    decisions_count, calls, admitted, preempted = 0, 0, 0, 0
    started = time.perf_counter()
    while True:
        calls += 1
        decisions = s.schedule(s.Snapshot(queues, {}, flavors, tuple(state.values())))
        decisions_count += len(decisions.admitted) + len(decisions.preemptions)
        decisions_count += len(decisions.pending)
        for admit in decisions.admitted:
            state[admit.workload] = replace(
                state[admit.workload], admission=admit.admission, quota_reserved_at=float(calls)
            )
        victims = [v.workload for p in decisions.preemptions for v in p.victims]
        for victim in victims:
            del state[victim]  # its pods stop and it leaves the benchmark
        for preempt in decisions.preemptions:
            state[preempt.preemptor] = replace(state[preempt.preemptor], preempting=True)
        admitted += len(decisions.admitted)
        preempted += len(victims)
        if not decisions.admitted and not victims:
            break
    elapsed = time.perf_counter() - started
    print(
        f"{label:<16} {elapsed:6.2f} s  {decisions_count / elapsed:8.0f} decisions/s  "
        f"{calls:3d} schedule() calls  admitted {admitted:5d}  preempted {preempted:5d}"
    )


def main() -> None:
    rng = random.Random(42)
    queues = cluster_queues(preempt=True)
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
    run("no preemption", pending, cluster_queues(preempt=False))
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
