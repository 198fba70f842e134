"""A deep LocalQueue: one settle admits every workload that fits, in a few rounds."""

from __future__ import annotations

import yaml

from clusters.services import provision_now
from tests.support import NAMESPACE, at
from workloads import admission, services
from workloads.models import Pod, Workload

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


TOPOLOGY = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: hosts}
spec:
  levels: [{nodeLabel: kubernetes.io/hostname}]
"""


def _simulated_rounds(cluster, monkeypatch, queues: str) -> list[tuple[bool, int]]:
    """Settles 100 queued jobs (windows of 16 and 64 heads fill up, 256 does not) on four CPU
    nodes; returns each simulated round's `first` and the workloads pending as it began."""
    # CPU nodes: the fixture's GPU nodes are tainted against pods that ask for no GPU.
    provision_now(cluster, name="cpupool", machine_type="n2-standard-32", node_count=4, at=at())
    services.apply(cluster, queues, source="queues.yaml", now=at())
    jobs = _jobs(range(100))
    services.apply(cluster, jobs, source="jobs.yaml", now=at(), namespace=NAMESPACE, admit=SKIP)
    rounds = []
    simulate_round = admission._simulate_round

    def noting_the_pending(cluster, now, *, first):
        pending = Workload.objects.filter(cluster=cluster, phase=Workload.Phase.PENDING)
        rounds.append((first, pending.count()))
        return simulate_round(cluster, now, first=first)

    monkeypatch.setattr(admission, "_simulate_round", noting_the_pending)
    admission.settle(cluster, at(seconds=1))
    assert Pod.objects.filter(cluster=cluster, node__isnull=False).count() == 100
    return rounds


def test_a_deep_queue_is_admitted_before_its_pods_are_bound(cluster, monkeypatch):
    """Kueue admits while kube-scheduler binds: after the first round of the simulated cluster
    at an instant, its rounds (which bind pods) wait while windows of heads fill up, so the
    last workload's admission does not wait behind the binding of the first ones' pods."""
    rounds = _simulated_rounds(cluster, monkeypatch, QUEUES)

    # The first round right after the first window, as at every instant; the next once the
    # queue is admitted.
    assert rounds[:2] == [(True, 84), (False, 0)]


def test_topology_aware_placement_sees_the_pods_bound_after_each_window(cluster, monkeypatch):
    """TAS places pods around the nodes other pods are bound to: a round after each window."""
    flavor = "metadata: {name: default}\n"
    tas_flavor = (
        "metadata: {name: default}\n"
        "spec: {nodeLabels: {cloud.google.com/gke-nodepool: cpupool}, topologyName: hosts}\n"
    )
    queues = TOPOLOGY + "---\n" + QUEUES.replace(flavor, tas_flavor, 1)

    rounds = _simulated_rounds(cluster, monkeypatch, queues)

    assert rounds[:3] == [(True, 84), (False, 20), (False, 0)]


def test_a_back_off_ending_at_the_instant_counts_before_a_deep_queue_takes_the_quota(cluster):
    """The simulated cluster's first round at an instant ends back-offs (and stops evicted
    workloads, finishes jobs): it comes before the second window, so a workload whose
    back-off ends now keeps its place at the head of the queue."""
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
