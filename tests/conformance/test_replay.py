"""Every scenario the project ships (scenarios/*.yaml) and the shared seed ones, replayed
through `manage.py replay` exactly as users run it."""

from __future__ import annotations

import contextlib
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command

from tests.shared import SHARED

PROJECT = Path(__file__).resolve().parents[2] / "scenarios"
GPU_SEED = PROJECT / "seed-gpu-mixed-train-inference.yaml"
GPU_MANIFESTS = PROJECT / "manifests" / "mix-train-and-inference" / "workloads"
OBJECT_FIELDS = {"phase", "admitted", "pending", "running", "preemptions", "pools", "slices"}
QUEUE_FIELDS = {"usage", "usageByFlavor", "borrowed", "pendingWorkloads", "admittedWorkloads"}

pytestmark = pytest.mark.django_db(transaction=True)


def scenario_params(folder: Path, label: str) -> list:
    """One test per scenario file, by glob: scenarios added later run without a change here."""
    if not folder.is_dir():
        reason = (
            f"{folder} is not next to this checkout: the shared seed scenarios are not run "
            "(the project's copies of them, in scenarios/, are)"
        )
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id=label)]
    return [pytest.param(path, id=f"{label}/{path.name}") for path in sorted(folder.glob("*.yaml"))]


def replay_json(*paths):
    out = StringIO()
    with contextlib.suppress(CommandError):
        call_command("replay", *map(str, paths), "--json", stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize(
    "path", scenario_params(PROJECT, "project") + scenario_params(SHARED / "scenarios", "shared")
)
def test_every_scenario_passes(path):
    (report,) = replay_json(path)
    assert [(step["index"], step.get("error"), step["failures"]) for step in report["steps"]
            if step["failures"]] == []  # fmt: skip
    assert report["ok"] is True


def test_gpu_seed_report_has_every_field_format_md_lists():
    (report,) = replay_json(GPU_SEED)
    assert set(report) == {"scenario", "ok", "steps", "events"}
    for step in report["steps"]:
        assert {"index", "action", "at", "objects", "failures"} <= set(step)
        for key, fields in step["objects"].items():
            expected = QUEUE_FIELDS if key.startswith("ClusterQueue/") else OBJECT_FIELDS
            if key.startswith("LocalQueue/"):
                expected = {"pendingWorkloads", "admittedWorkloads"}
            assert expected <= set(fields), key
    kinds = {e["kind"] for e in report["events"]}
    assert {
        "workload.submitted",
        "workload.quota_reserved",
        "workload.admitted",
        "workload.preempted",
        "workload.evicted",
        "workload.requeued",
        "workload.resumed",
        "checkpoint.saved",
        "workload.scaled",
        "workload.finished",
    } <= kinds
    for event in report["events"]:
        assert set(event) == {"seq", "at", "kind", "object", "workload", "message"}


def test_preemption_event_names_the_preemptor_and_resume_names_the_checkpoint():
    (report,) = replay_json(GPU_SEED)
    preempted = [e for e in report["events"] if e["kind"] == "workload.preempted"]
    assert len(preempted) == 1
    assert preempted[0]["object"] == "Job/llm/finetune-gemma-l4"
    assert "Deployment/llm/tgi-gemma-deployment" in preempted[0]["message"]
    resumed = [e for e in report["events"] if e["kind"] == "workload.resumed"]
    assert [e["object"] for e in resumed] == ["Job/llm/finetune-gemma-l4"]
    assert "step 10" in resumed[0]["message"]


def test_replay_leaves_the_database_as_it_found_it():
    from workloads.models import KubeObject

    replay_json(GPU_SEED)
    assert not KubeObject.objects.exists()


def test_replay_exits_non_zero_when_an_expectation_fails(tmp_path):
    scenario = tmp_path / "wrong.yaml"
    scenario.write_text(
        "name: wrong\n"
        "cluster: {name: c, nodePools: [{name: p, machineType: g2-standard-24, nodes: 1}]}\n"
        "steps:\n"
        f"  - apply: {GPU_MANIFESTS}/flavors.yaml\n"
        "  - expect:\n"
        "      ClusterQueue/missing: {pendingWorkloads: 1}\n"
    )
    with pytest.raises(CommandError, match="failed: wrong"):
        call_command("replay", str(scenario), stdout=StringIO())


def test_a_rejected_apply_is_reported_and_recorded_but_changes_nothing(tmp_path):
    scenario = tmp_path / "rejected.yaml"
    scenario.write_text(
        "name: rejected\n"
        "cluster: {name: c, nodePools: [{name: p, machineType: g2-standard-24, nodes: 1}]}\n"
        "steps:\n"
        "  - apply:\n"
        "      manifest: |\n"
        "        apiVersion: batch/v1\n"
        "        kind: Job\n"
        "        metadata: {name: train, labels: {kueue.x-k8s.io/queue-name: missing}}\n"
        "        spec:\n"
        "          template:\n"
        "            spec:\n"
        # Refused for its PriorityClass: a missing LocalQueue is accepted, as by Kueue.
        "              priorityClassName: missing\n"
        "              containers: [{name: c, image: i}]\n"
        "    namespace: llm\n"
        "    expectRejected: true\n"
    )
    (report,) = replay_json(scenario)
    assert report["ok"] is True
    assert "missing" in report["steps"][0]["error"]
    assert report["steps"][0]["objects"] == {}
    assert [e["kind"] for e in report["events"]][-1] == "workload.rejected"


def test_jetstream_seed_places_both_replicas_on_the_tpu_pool():
    (report,) = replay_json(PROJECT / "seed-tpu-v5e-jetstream.yaml")
    final = report["steps"][-1]["objects"]["Deployment/default/jetstream-pytorch-server"]
    assert final["running"] == 2
    assert final["pools"] == ["tpu-nodepool"]


def test_dynamic_slicing_seed_forms_slices_before_admission_and_deletes_them_on_eviction():
    (report,) = replay_json(PROJECT / "seed-tpu-dynamic-slicing.yaml")
    first = "JobSet/llm-d-pd-disaggregation/kueue-jobset-simple-subslicing"
    kinds = [e["kind"] for e in report["events"] if e["object"] == first]
    created, activated = kinds.index("slice.created"), kinds.index("slice.activated")
    assert created < activated < kinds.index("workload.admitted")
    assert kinds.index("workload.preempted") < kinds.index("slice.deleted")
    assert kinds.count("slice.created") == 12


def test_balanced_placement_scenario_depends_on_its_feature_gate(tmp_path: Path) -> None:
    """scenarios/tas-balanced-placement.yaml without its Configuration (TASBalancedPlacement
    off, Kueue's default): BestFit packs the 12-pod Job 8 + 4, so the Job that requires one
    host for 3 pods is admitted at once, where with the gate it waits (Kueue
    pkg/cache/scheduler/tas_balanced_placement.go is used only behind the gate)."""
    source = PROJECT / "tas-balanced-placement.yaml"
    scenario = yaml.safe_load(source.read_text())
    del scenario["configuration"]
    gate_off = tmp_path / source.name
    gate_off.write_text(yaml.safe_dump(scenario))
    key = "Job/team/one-host"

    def first_check(report: dict[str, Any]) -> dict[str, Any]:
        steps = report["steps"]
        applied = next(i for i, step in enumerate(steps) if key in step["objects"])
        check = next(step for step in steps[applied:] if step["action"] == "expect")
        return check["objects"][key]

    (on,), (off,) = replay_json(source), replay_json(gate_off)
    assert (first_check(on)["phase"], first_check(on)["running"]) == ("Pending", 0)
    assert (first_check(off)["phase"], first_check(off)["running"]) == ("Admitted", 3)
