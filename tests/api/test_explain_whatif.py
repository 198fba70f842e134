"""The GPU workflow over REST: why the fine-tune waits, and what a second one would cost."""

from __future__ import annotations

import pytest

from tests.api.test_workloads import post_manifests
from tests.shared import GPU_SEED, GPU_SEED_FILES, GPU_SEED_PLACEHOLDERS, requires_shared
from tests.support import at, row_counts
from workloads import admission, checkpoints, runtime
from workloads.models import Workload

pytestmark = [pytest.mark.django_db, requires_shared]

# Default simulation: 30 s startup, a step every 10 s, a checkpoint every 100 steps.
FINE_TUNE_CHECKPOINTS = 'sim.accelplane.dev/checkpoint-every: "10"'


def seed(name):
    text = (GPU_SEED / name).read_text()
    for placeholder, value in GPU_SEED_PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    return text


@pytest.fixture
def workflow(admin, alice, clock, tenants):
    """Queues by the admin; TGI (1 replica) and the fine-tune by team llm; 20 minutes run."""
    queues = "---\n".join(seed(name) for name in GPU_SEED_FILES)
    assert post_manifests(admin, queues, namespace="llm").status_code == 201
    objects = post_manifests(
        alice,
        seed("tgi-gemma-2-9b-it-hp.yaml") + "---\n" + seed("fine-tune-l4.yaml"),
        namespace="llm",
    ).json()["objects"]
    clock.at = at(minutes=20)
    admission.advance(tenants, at(), clock.at)
    return {o["kind"]: o["id"] for o in objects}


def fine_tune():
    return Workload.objects.select_related("owner").get(owner__name="finetune-gemma-l4")


def test_a_preempted_fine_tune_is_explained_by_the_tgi_pods_and_the_gpu_arithmetic(
    alice, clock, workflow
):
    scaled = alice.post(
        f"/api/v1/workloads/{workflow['Deployment']}/scale", {"replicas": 2}, format="json"
    )
    assert scaled.status_code == 200
    assert fine_tune().preemptions == 1
    (report,) = alice.get(f"/api/v1/workloads/{workflow['Job']}/explain").json()["workloads"]
    assert report["preemption"]["by"]["owner"] == "tgi-gemma-deployment"
    blockers = {b["owner"] for b in report["blockers"]}
    assert blockers == {"tgi-gemma-deployment"}
    assert len(report["blockers"]) == 2  # both TGI pods hold 2 GPUs each
    gpu = next(q for q in report["quota"] if q["resource"] == "nvidia.com/gpu")
    assert (gpu["requested"], gpu["used"]) == ("4", "4")
    assert "requested 4 > available" in gpu["arithmetic"]


def test_whatif_for_a_second_fine_tune_reports_its_victims_and_their_lost_steps(
    alice, clock, workflow
):
    running = fine_tune()
    lost = runtime.current_step(running, clock.at) - checkpoints.latest_step(running)
    assert lost > 0
    before = row_counts()
    second = seed("fine-tune-l4.yaml").replace("finetune-gemma-l4", "finetune-urgent")
    # Same priority: it waits behind the first, preempting nobody.
    same = post_manifests(alice, second, path="/api/v1/whatif", namespace="llm").json()
    (job,) = [w for w in same["workloads"] if w["workload"]["owner"] == "finetune-urgent"]
    assert (job["result"], job["preempts"]) == ("pending", [])
    # Serving priority: the running fine-tune is the victim and loses its steps since step N.
    urgent = second.replace("low-priority-preempting", "high-priority-preempting")
    report = post_manifests(alice, urgent, path="/api/v1/whatif", namespace="llm").json()
    (job,) = [w for w in report["workloads"] if w["workload"]["owner"] == "finetune-urgent"]
    assert job["result"] == "admitted_after_preemption"
    (victim,) = job["preempts"]
    assert (victim["owner"], victim["steps_lost"]) == ("finetune-gemma-l4", lost)
    assert row_counts() == before
