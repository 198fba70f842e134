"""Kueue's Configuration and waitForPodsReady: parsing with Kueue's defaults, the timeout
eviction with its requeuing back-off and deactivation, and blockAdmission."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from scheduler import PendingReason, schedule
from scheduler.model import SchedulingConfig
from tests.support import T0
from tests.unit.scheduler.builders import admitted, gpu_cq, snapshot, wl
from workloads import scenarios, services
from workloads.manifests import ManifestError, load_documents, queue_spec, render
from workloads.manifests.configuration import default_configuration
from workloads.models import Configuration
from workloads.runtime import backoff_seconds
from workloads.snapshot import scheduling_config

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "wait-for-pods-ready-timeout.yaml"


def spec_of(text: str) -> dict:
    (doc,) = load_documents(text, source="test")
    return queue_spec(doc)


def test_an_empty_v1beta2_configuration_takes_kueues_defaults():
    """apis/config/v1beta2/defaults.go `SetDefaults_Configuration`: waitForPodsReady is on with
    a 30m timeout, recoveryTimeout = timeout, blockAdmission false, requeuing by Eviction
    with back-off 60s..3600s and no limit; fair sharing and admission fair sharing off."""
    spec = spec_of("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n")
    assert spec["wait_for_pods_ready"] == {
        "enable": True,
        "timeout": 1800.0,
        "recovery_timeout": 1800.0,
        "block_admission": False,
        "requeuing_strategy": {
            "timestamp": "Eviction",
            "backoff_limit_count": None,
            "backoff_base_seconds": 60,
            "backoff_max_seconds": 3600,
        },
    }
    assert spec == default_configuration()
    config = scheduling_config(spec)
    assert (config.fair_sharing, config.admission_fair_sharing, config.block_admission) == (
        False,
        None,
        False,
    )
    assert config.partial_admission is True


def test_v1beta1_spelling_is_off_unless_enabled_and_then_blocks_admission():
    """apis/config/v1beta1/defaults.go: waitForPodsReady needs `enable`, and blockAdmission then
    defaults to true; fairSharing needs `enable`. Stored in v1beta2's terms."""
    off = spec_of("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n")
    assert off["wait_for_pods_ready"]["enable"] is False
    rendered = render("Configuration", "default", None, off)
    assert rendered["featureGates"] == {"DisableWaitForPodsReady": True}
    assert spec_of(yaml.safe_dump(rendered))["wait_for_pods_ready"]["enable"] is False
    on = spec_of(
        "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
        "waitForPodsReady: {enable: true, timeout: 10m}\n"
        "fairSharing: {enable: true, preemptionStrategies: [LessThanInitialShare]}\n"
    )
    assert on["wait_for_pods_ready"]["block_admission"] is True
    assert on["wait_for_pods_ready"]["timeout"] == 600.0
    assert scheduling_config(on).fair_sharing_strategies == ("LessThanInitialShare",)


def test_the_rendered_configuration_round_trips_in_go_duration_spelling():
    text = (
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "waitForPodsReady: {timeout: 1h30m, recoveryTimeout: 0s, blockAdmission: true}\n"
        "admissionFairSharing: {usageHalfLifeTime: 10m, resourceWeights: {cpu: 0.5}}\n"
        "integrations: {frameworks: [batch/job]}\n"
    )
    spec = spec_of(text)
    out = render("Configuration", "default", None, spec)
    assert "metadata" not in out  # Kueue's strict decoder refuses it
    assert out["waitForPodsReady"]["timeout"] == "1h30m0s"
    assert out["waitForPodsReady"]["recoveryTimeout"] == "0s"
    assert out["admissionFairSharing"]["usageSamplingInterval"] == "5m0s"
    assert out["integrations"] == {"frameworks": ["batch/job"]}
    assert spec_of(yaml.safe_dump(out)) == spec


@pytest.mark.parametrize(
    ("body", "path", "words"),
    [
        ("waitForPodsReady: {timeout: -1m}", "waitForPodsReady.timeout", "negative"),
        ("waitForPodsReady: {timeout: 30}", "waitForPodsReady.timeout", "duration string"),
        ("waitForPodsReady: {timeout: 9000h}", "waitForPodsReady.timeout", "at most"),
        ("waitForPodsReady: {enable: true}", "waitForPodsReady.enable", "unknown field"),
        (
            "waitForPodsReady: {requeuingStrategy: {backoffLimitCount: -1}}",
            "waitForPodsReady.requeuingStrategy.backoffLimitCount",
            "at least 0",
        ),
        (
            "waitForPodsReady: {requeuingStrategy: {timestamp: Admission}}",
            "waitForPodsReady.requeuingStrategy.timestamp",
            "Eviction, Creation",
        ),
        ("fairSharing: {}", "fairSharing.preemptionStrategies", "must be specified"),
        (
            "fairSharing: {preemptionStrategies: [LessThanInitialShare, "
            "LessThanOrEqualToFinalShare]}",
            "fairSharing.preemptionStrategies",
            "supported lists",
        ),
        (
            "admissionFairSharing: {resourceWeights: {cpu: -1}}",
            "admissionFairSharing.resourceWeights.cpu",
            "negative",
        ),
        ("featureGates: {PartialAdmission: 'no'}", "featureGates.PartialAdmission", "boolean"),
        ("webhook: 9443", "webhook", "mapping"),
        ("scheduler: {}", "scheduler", "unknown field"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(body, path, words):
    """pkg/config/validation.go (validateWaitForPodsReady, validateFairSharing,
    validateAdmissionFairSharing), plus strict fields and our duration bound."""
    with pytest.raises(ManifestError) as refused:
        spec_of(f"apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n{body}\n")
    assert refused.value.path == path
    assert words in str(refused.value)


@pytest.mark.parametrize(
    ("count", "seconds"), [(1, 60), (2, 120), (3, 240), (6, 1920), (7, 3600), (30, 3600)]
)
def test_the_requeuing_back_off_doubles_up_to_its_cap(count, seconds):
    """pkg/workload `UpdateRequeueState`: base * 2^(n-1) capped at backoffMaxSeconds (Kueue's
    0.01% jitter left out: the simulator is deterministic)."""
    assert backoff_seconds(count, 60, 3600) == seconds


@pytest.mark.django_db
def test_a_cluster_has_one_configuration_and_applying_another_replaces_it(cluster):
    first = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
    (applied,) = services.apply(cluster, first, source="t", now=T0)
    assert (applied.key, applied.action) == ("Configuration/default", "created")
    second = (
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "metadata: {name: tuned}\nwaitForPodsReady: {blockAdmission: true}\n"
    )
    (applied,) = services.apply(cluster, second, source="t", now=T0)
    assert applied.action == "configured"
    row = Configuration.objects.get(cluster=cluster)
    assert row.name == "tuned"
    assert row.spec["wait_for_pods_ready"]["block_admission"] is True
    assert services.rendered(row)["waitForPodsReady"]["blockAdmission"] is True


def test_block_admission_waits_while_an_admitted_workload_is_not_ready():
    """pkg/scheduler/scheduler.go `waitForPodsReadyIfNeeded` and pkg/cache/scheduler
    `podsReadyForAllAdmittedWorkloads` (scheduler_test.go, cache_test.go
    TestCachePodsReadyForAllAdmittedWorkloads): with blockAdmission, a workload that fits
    waits (WaitingForPodsReady) until every admitted workload has its pods ready."""
    queue = gpu_cq("cq", 8)
    running = admitted("ns/running", "cq", 2)
    pending = [wl("ns/a", "cq", 1, created=1), wl("ns/b", "cq", 1, created=2)]
    blocking = replace(snapshot([queue], [running, *pending]), config=_block())
    decisions = schedule(blocking)
    assert decisions.admitted == ()
    (waiting,) = decisions.pending
    assert (waiting.workload, waiting.reason) == ("ns/a", PendingReason.WAITING_FOR_PODS_READY)

    ready = replace(running, pods_ready=True)
    decisions = schedule(replace(blocking, workloads=(ready, *pending)))
    # The one admitted now has no ready pods yet: the next waits for it.
    assert [a.workload for a in decisions.admitted] == ["ns/a"]
    assert {p.workload: p.reason for p in decisions.pending} == {
        "ns/b": PendingReason.WAITING_FOR_PODS_READY
    }
    unblocked = schedule(snapshot([queue], [running, *pending]))
    assert [a.workload for a in unblocked.admitted] == ["ns/a", "ns/b"]


def _block() -> SchedulingConfig:
    return SchedulingConfig(block_admission=True)


@pytest.mark.django_db
def test_a_workload_whose_pods_never_become_ready_is_evicted_requeued_then_deactivated():
    """pkg/controller/core/workload_controller.go `reconcileNotReadyTimeout` and
    `triggerDeactivation` (workload_controller_test.go, "should evict/requeue the workload
    after the PodsReady timeout", "deactivate the workload when the requeuing limit is
    exceeded"): evicted with reason PodsReadyTimeout at admission + timeout, queued again
    after 60s then 120s, deactivated (RequeuingLimitExceeded) past backoffLimitCount."""
    report = scenarios.run(SCENARIO)
    assert report.ok, [s for s in report.steps if s["failures"]]
    stuck = [e for e in report.events if "stuck" in (e["object"] or "")]
    evictions = [(e["at"], e["message"]) for e in stuck if e["kind"] == "workload.evicted"]
    assert [at for at, _ in evictions] == [
        "2026-01-01T00:05:00Z",
        "2026-01-01T00:11:00Z",
        "2026-01-01T00:18:00Z",
    ]
    assert [m.split(")")[0] for _, m in evictions] == [
        "evicted (PodsReadyTimeout",
        "evicted (PodsReadyTimeout",
        "evicted (Deactivated",
    ]
    requeued = [e["at"] for e in stuck if e["kind"] == "workload.requeued"]
    assert requeued == ["2026-01-01T00:06:00Z", "2026-01-01T00:13:00Z"]
    healthy = [e for e in report.events if "healthy" in (e["object"] or "")]
    assert not [e for e in healthy if e["kind"] == "workload.evicted"]
