"""A deep LocalQueue: one settle admits every workload that fits, in a few rounds."""

from __future__ import annotations

import yaml

from clusters.services import provision_now
from tests.support import NAMESPACE, at
from workloads import admission, services
from workloads.models import Pod, Workload

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


def test_one_settle_admits_a_deep_queue_in_windows_growing_fourfold(cluster, monkeypatch):
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
    # Each round reads every workload holding quota again: 16 + 64 + 256 heads, three rounds
    # (doubling took five).
    assert windows == [16, 64, 256]


def test_a_deep_queue_is_admitted_before_its_pods_are_bound(cluster, monkeypatch):
    """Kueue admits while kube-scheduler binds: the simulated cluster's round (which binds
    pods) waits until no window of heads fills up, so the last workload's admission does not
    wait behind the binding of the first ones' pods."""
    # CPU nodes: the fixture's GPU nodes are tainted against pods that ask for no GPU.
    provision_now(cluster, name="cpupool", machine_type="n2-standard-32", node_count=3, at=at())
    services.apply(cluster, QUEUES, source="queues.yaml", now=at())
    services.apply(
        cluster,
        _jobs(range(60)),  # windows of 16 and 64 heads
        source="jobs.yaml",
        now=at(),
        namespace=NAMESPACE,
        admit=services.Admit.SKIP,
    )
    pending_at_each_round = []
    simulate_round = admission._simulate_round

    def noting_the_pending(cluster, now, *, first):
        pending_at_each_round.append(
            Workload.objects.filter(cluster=cluster, phase=Workload.Phase.PENDING).count()
        )
        return simulate_round(cluster, now, first=first)

    monkeypatch.setattr(admission, "_simulate_round", noting_the_pending)

    admission.settle(cluster, at(seconds=1))

    assert pending_at_each_round[0] == 0
    assert Pod.objects.filter(cluster=cluster, node__isnull=False).count() == 60
