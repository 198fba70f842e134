"""Admission fair sharing state kept in the database: LocalQueue consumed resources and weight.

Follows Kueue `pkg/controller/core/localqueue_controller.go` `reconcileConsumedUsage` (decay
towards the admitted usage once per `usageSamplingInterval`), `pkg/util/admissionfairsharing`
`CalculateDecayedConsumed` / `CalculateEntryPenalty`, and the LocalQueue `fairSharing.weight`
field of the v1beta2 CRD.
"""

from __future__ import annotations

import textwrap

import pytest
import yaml

from tests.shared import requires_shared
from tests.support import GPU_QUEUES, NAMESPACE, at, job
from workloads import admission, fairsharing, services, snapshot
from workloads.manifests import ManifestError, load_documents, queue_spec, render
from workloads.models import LocalQueue, Workload

GIB = 2**30
AFS_CONFIGURATION = """
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
admissionFairSharing:
  usageHalfLifeTime: 10m
  usageSamplingInterval: 5m
"""
# One Job of 2 pods, each asking for 1 cpu, 4Gi and 2 GPUs, in Kubernetes units.
JOB_USAGE = {"cpu": 2.0, "memory": 8.0 * GIB, "nvidia.com/gpu": 4.0}


def _apply(cluster, text, source):
    services.apply(cluster, text, source=source, now=at(), namespace=NAMESPACE)


@pytest.fixture
def afs_cluster(gpu_queues):
    _apply(gpu_queues, AFS_CONFIGURATION, "configuration.yaml")
    return gpu_queues


def _queue(cluster):
    return LocalQueue.objects.get(cluster=cluster, namespace=NAMESPACE, name="team-llm")


def _sample(cluster, now):
    """A sample at `now` under the cluster's Configuration, as an admission run takes one."""
    config = snapshot.cluster_scheduling_config(cluster).admission_fair_sharing
    fairsharing.sample(cluster, now, config)


def _admit_job(cluster):
    """The Job admitted into gpu-queue (whose admission mode leaves its LocalQueue uncharged,
    so only sampling moves the consumed resources)."""
    _apply(cluster, job(), "job.yaml")
    admission.admit_pending(cluster, at())
    assert Workload.objects.get(cluster=cluster).phase == Workload.Phase.ADMITTED


def test_sample_decays_consumed_towards_admitted_usage_once_per_interval(afs_cluster):
    """alpha = 1 - 0.5^(elapsed / usageHalfLifeTime): after one half-life half of the held
    usage is folded in, after a second one three quarters; a sample less than
    usageSamplingInterval after the last one changes nothing."""
    _admit_job(afs_cluster)  # the first sample (inside admit_pending) starts the clock at T0
    assert (_queue(afs_cluster).consumed_resources, _queue(afs_cluster).usage_sampled_at) == (
        {},
        at(),
    )

    _sample(afs_cluster, at(minutes=4))
    assert _queue(afs_cluster).usage_sampled_at == at()

    _sample(afs_cluster, at(minutes=10))
    queue = _queue(afs_cluster)
    assert queue.usage_sampled_at == at(minutes=10)
    assert queue.consumed_resources == pytest.approx({k: v / 2 for k, v in JOB_USAGE.items()})

    _sample(afs_cluster, at(minutes=20))
    assert _queue(afs_cluster).consumed_resources == pytest.approx(
        {k: v * 3 / 4 for k, v in JOB_USAGE.items()}
    )


def test_quota_reserved_while_checks_are_pending_is_not_consumed(afs_cluster):
    """Kueue samples the LocalQueue's admitted usage (`GetAdmittedUsage`), not its reserved."""
    _admit_job(afs_cluster)
    Workload.objects.filter(cluster=afs_cluster).update(phase=Workload.Phase.QUOTA_RESERVED)
    _sample(afs_cluster, at(minutes=10))
    assert _queue(afs_cluster).consumed_resources == {}


def test_sample_decays_towards_zero_once_nothing_is_admitted(afs_cluster):
    LocalQueue.objects.filter(cluster=afs_cluster).update(
        consumed_resources={"cpu": 8.0}, usage_sampled_at=at()
    )
    _sample(afs_cluster, at(minutes=20))  # two half-lives, nothing held
    assert _queue(afs_cluster).consumed_resources == pytest.approx({"cpu": 2.0})


def test_zero_half_life_resets_consumed_resources(afs_cluster):
    """Kueue `reconcileConsumedUsage`: usageHalfLifeTime 0 clears the consumed resources."""
    _apply(afs_cluster, AFS_CONFIGURATION.replace("10m", "0s"), "configuration.yaml")
    LocalQueue.objects.filter(cluster=afs_cluster).update(
        consumed_resources={"cpu": 8.0}, usage_sampled_at=at()
    )
    _sample(afs_cluster, at(minutes=5))
    assert _queue(afs_cluster).consumed_resources == {}


def test_sample_does_nothing_without_admission_fair_sharing(gpu_queues):
    _sample(gpu_queues, at(minutes=30))
    assert _queue(gpu_queues).usage_sampled_at is None


def test_admitting_into_a_fair_sharing_queue_charges_the_entry_penalty(afs_cluster):
    """Kueue `CalculateEntryPenalty`: request * alpha(usageSamplingInterval), here
    1 - 0.5^(5m / 10m), added to what the LocalQueue consumed before."""
    fair_queue = GPU_QUEUES.replace(
        "  namespaceSelector: {}\n",
        "  namespaceSelector: {}\n"
        "  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}\n",
    )
    assert fair_queue != GPU_QUEUES
    _apply(afs_cluster, fair_queue, "queues.yaml")
    LocalQueue.objects.filter(cluster=afs_cluster).update(
        consumed_resources={"cpu": 1.0}, usage_sampled_at=at()
    )
    _apply(afs_cluster, job(), "job.yaml")
    admission.admit_pending(afs_cluster, at())

    rate = 1 - 0.5**0.5
    expected = {k: v * rate for k, v in JOB_USAGE.items()}
    expected["cpu"] += 1.0
    assert _queue(afs_cluster).consumed_resources == pytest.approx(expected)


def test_no_penalty_outside_usage_based_admission_fair_sharing(afs_cluster):
    _admit_job(afs_cluster)
    assert _queue(afs_cluster).consumed_resources == {}


# -- LocalQueue fairSharing.weight ----------------------------------------------------------------

LOCAL_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: team}
spec: {clusterQueue: cq, fairSharing: {weight: WEIGHT}}
"""


def _local_queue_spec(weight):
    (doc,) = load_documents(
        textwrap.dedent(LOCAL_QUEUE.replace("WEIGHT", weight)), source="lq.yaml"
    )
    return queue_spec(doc)


@pytest.mark.parametrize(("weight", "expected"), [("2", 2.0), ('"250m"', 0.25), ("0", 0.0)])
def test_local_queue_weight_is_read_and_rendered_back(weight, expected):
    spec = _local_queue_spec(weight)
    assert spec["fair_weight"] == expected
    rendered = render("LocalQueue", "lq", "team", spec)
    (again,) = load_documents(yaml.safe_dump(rendered), source="rendered.yaml")
    assert queue_spec(again) == spec


def test_local_queue_without_fair_sharing_has_no_weight():
    text = LOCAL_QUEUE.replace(", fairSharing: {weight: WEIGHT}", "")
    (doc,) = load_documents(textwrap.dedent(text), source="lq.yaml")
    spec = queue_spec(doc)
    assert spec["fair_weight"] is None
    assert "fairSharing" not in render("LocalQueue", "lq", "team", spec)["spec"]


@pytest.mark.parametrize(
    ("weight", "message"),
    [("-1", "must not be negative"), ('"1n"', "greater than 1n"), ("heavy", "not a valid")],
)
def test_local_queue_rejects_a_weight_kueue_refuses(weight, message):
    with pytest.raises(ManifestError) as caught:
        _local_queue_spec(weight)
    assert (caught.value.path, caught.value.object) == (
        "spec.fairSharing.weight",
        "LocalQueue team/lq",
    )
    assert message in caught.value.message


@requires_shared
@pytest.mark.parametrize("weight", ["3", '"0.5"', "0"])
def test_rendered_local_queue_weight_is_valid_against_the_crd(weight):
    from tests.conformance.test_crd_schemas import errors

    rendered = render("LocalQueue", "lq", "team", _local_queue_spec(weight))
    assert "weight" in rendered["spec"]["fairSharing"]
    assert errors(rendered) == []
