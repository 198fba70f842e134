"""A deep LocalQueue: one settle admits every workload that fits, in a few rounds."""

from __future__ import annotations

import yaml

from tests.support import NAMESPACE, at
from workloads import admission, services
from workloads.models import Workload

SKIP = services.Admit.SKIP

QUEUES = f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: default}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: deep}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: default, resources: [{{name: cpu, nominalQuota: 1000}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: lq, namespace: {NAMESPACE}}}
spec: {{clusterQueue: deep}}
"""


def _jobs(numbers: range) -> str:
    return yaml.safe_dump_all(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"job-{i}", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": 1}}}
                        ],
                    }
                }
            },
        }
        for i in numbers
    )


def test_one_settle_admits_a_deep_queue_in_two_windows(cluster, monkeypatch):
    services.apply(cluster, QUEUES, source="queues.yaml", now=at())
    for first in range(0, 300, 100):  # a request's most documents
        jobs = _jobs(range(first, first + 100))
        skip = services.Admit.SKIP
        services.apply(cluster, jobs, source="jobs.yaml", now=at(), namespace=NAMESPACE, admit=skip)
    windows = []
    admit_pending = admission.admit_pending

    def noting_the_window(cluster, now, max_admissions=None, heads_per_queue=16):
        windows.append(heads_per_queue)
        return admit_pending(cluster, now, max_admissions, heads_per_queue)

    monkeypatch.setattr(admission, "admit_pending", noting_the_window)

    admission.settle(cluster, at(seconds=1))

    phases = Workload.objects.filter(cluster=cluster).values_list("phase", flat=True)
    assert list(phases) == [Workload.Phase.ADMITTED] * 300
    # Each round reads every workload holding quota again: the first window of 16 heads fills
    # up, the next takes the rest of the queue (growing fourfold took 16, 64 and 256 heads).
    assert windows == [16, 16 * admission.WINDOW_GROWTH]


def test_a_back_off_ending_at_the_instant_counts_before_a_deep_queue_takes_the_quota(cluster):
    """The simulated cluster's round after the first window ends back-offs (and stops evicted
    workloads, finishes jobs) before the next window: a workload whose back-off ends now
    keeps its place at the head of the queue."""
    services.apply(
        cluster, QUEUES.replace("nominalQuota: 1000", "nominalQuota: 40"), source="q", now=at()
    )
    services.apply(cluster, _jobs(range(1)), source="b", now=at(), namespace=NAMESPACE, admit=SKIP)
    Workload.objects.filter(cluster=cluster).update(requeue_at=at(seconds=1))
    later = _jobs(range(1, 41))
    services.apply(cluster, later, source="j", now=at(seconds=1), namespace=NAMESPACE, admit=SKIP)

    admission.settle(cluster, at(seconds=1))

    # The first window admits 16 of the 40 newer jobs; the back-off ends; the second admits
    # job-0, the oldest, and 23 more: one of the newer jobs waits for quota.
    admitted = Workload.objects.filter(cluster=cluster, phase=Workload.Phase.ADMITTED)
    assert admitted.filter(owner__name="job-0").exists()
    assert admitted.count() == 40
