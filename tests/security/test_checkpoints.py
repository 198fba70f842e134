"""One checkpoint rule for every reporter (a step after the latest), kept under concurrent
reports by a lock on the owner and a unique (owner, step) constraint (issue 13, finding 12).

The race tests need PostgreSQL's row locks; on SQLite every writer already waits its turn.
"""

from __future__ import annotations

import os
import random
import threading

import pytest
from django.db import IntegrityError, connection, transaction
from rest_framework.test import APIClient

from tests.api.conftest import alice, clock, tenants  # noqa: F401 (fixtures)
from tests.api.test_workloads import post_manifests
from tests.support import at, job
from workloads import admission, checkpoints
from workloads.kube.checkpoints import record_from_log
from workloads.models import Checkpoint, KubeObject, Workload

on_postgres = pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="racing writers need PostgreSQL: set DATABASE_URL=postgres://...",
)


def trainer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def running_job(alice, clock):  # noqa: F811
    """A running training job (submitted at T0) and the URL and token its trainer reports
    checkpoints with."""
    created = post_manifests(alice, job(), namespace="llm").json()["objects"][0]
    token = alice.get(f"/api/v1/workloads/{created['id']}").json()["checkpoint_token"]
    assert Workload.objects.get(owner_id=created["id"]).phase == Workload.Phase.ADMITTED
    return f"/api/v1/workloads/{created['id']}/checkpoints", token, created["id"]


def saved_steps(owner_id):
    """Steps in the order they were recorded."""
    return list(Checkpoint.objects.filter(owner_id=owner_id).order_by("id").values_list("step"))


def test_a_repeated_or_older_step_is_refused_with_409_naming_the_latest(running_job):
    url, token, owner_id = running_job
    assert trainer(token).post(url, {"step": 120}, format="json").status_code == 201

    for step in (120, 100):
        response = trainer(token).post(url, {"step": step}, format="json")
        assert response.status_code == 409
        assert response.json() == {
            "detail": f"step {step} is not after the latest checkpoint (step 120)"
        }
    assert saved_steps(owner_id) == [(120,)]


def test_the_simulator_training_logs_and_the_api_share_one_rule(running_job, tenants):  # noqa: F811
    url, token, owner_id = running_job
    # job(): 60 s startup, a step a minute, a checkpoint every 10 steps.
    admission.advance(tenants, at(), at(minutes=12))
    assert saved_steps(owner_id) == [(10,)]
    row = Workload.objects.select_related("owner", "cluster").get(owner_id=owner_id)

    assert trainer(token).post(url, {"step": 10}, format="json").status_code == 409
    lines = ["Saving model checkpoint to /out/checkpoint-10", "Saving model checkpoint to /x/c-1"]
    assert record_from_log(row, lines, at(minutes=12)) == []
    lines = ["Saving model checkpoint to /out/checkpoint-20"]
    assert [c.step for c in record_from_log(row, lines, at(minutes=12))] == [20]
    with pytest.raises(checkpoints.NotNewer):
        checkpoints.record(row, 15, at(minutes=12))
    admission.advance(tenants, at(minutes=12), at(minutes=32))

    assert saved_steps(owner_id) == [(10,), (20,), (30,)]


def test_the_database_refuses_a_second_checkpoint_of_one_step(running_job):
    _, _, owner_id = running_job
    owner = KubeObject.objects.get(pk=owner_id)
    Checkpoint.objects.create(owner=owner, step=5, saved_at=at())

    with pytest.raises(IntegrityError), transaction.atomic():
        Checkpoint.objects.create(owner=owner, step=5, saved_at=at())


def race_posts(url, token, steps):
    """POST each step from its own thread, all released at once; the status codes by step."""
    start = threading.Barrier(len(steps))
    codes: dict[int, list[int]] = {}
    lock = threading.Lock()

    def post(step):
        try:
            start.wait()
            code = trainer(token).post(url, {"step": step}, format="json").status_code
            with lock:
                codes.setdefault(step, []).append(code)
        finally:
            connection.close()

    threads = [threading.Thread(target=post, args=(step,)) for step in steps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return codes


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_two_trainers_posting_one_step_at_once_record_it_once(running_job):
    url, token, owner_id = running_job

    codes = race_posts(url, token, [40] * 6)

    assert sorted(codes[40]) == [201] + [409] * 5
    assert saved_steps(owner_id) == [(40,)]


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_racing_reports_are_recorded_in_increasing_steps(running_job):
    url, token, owner_id = running_job
    shuffle = random.Random(13).shuffle
    created = set()
    for burst in range(1, 6):
        steps = [1000 * burst + 10 * i for i in range(8)]
        shuffle(steps)

        codes = race_posts(url, token, steps)

        assert {code for step_codes in codes.values() for code in step_codes} <= {201, 409}
        created |= {step for step, step_codes in codes.items() if step_codes == [201]}
    recorded = [step for (step,) in saved_steps(owner_id)]
    assert recorded == sorted(set(recorded))
    assert set(recorded) == created
