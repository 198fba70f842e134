"""The full stack's admission mode: the API stores and answers at once; a worker admits."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from events.models import Event
from teams import services as teams
from tests.integration.workers import wait_for
from tests.support import NAMESPACE, job
from workloads import parking, tasks
from workloads.models import Workload

pytestmark = pytest.mark.django_db(transaction=True)

SUBMISSIONS = 4  # 2 GPUs each: 8 GPUs asked of a 6-GPU queue
ADMITTED_WITHIN = 30.0  # seconds: a worker's start-up plus one settle
# Seconds after the release: Kueue's batch period (1 s), then the run. Beat, which would
# requeue at its next tick anyway, does not run here.
REQUEUED_WITHIN = 10.0


@pytest.fixture
def submitter(gpu_queues):
    teams.ensure_team("llm", namespaces=[NAMESPACE], members=[("alice", "submitter")])
    _, token = teams.issue_token(User.objects.get(username="alice"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def all_numbered() -> bool:
    return not Event.objects.filter(seq=None).exists()  # read, not numbered by the read


def submit(submitter, count: int) -> None:
    for i in range(count):
        response = submitter.post(
            f"/api/v1/workloads?namespace={NAMESPACE}",
            job(f"train-{i}", pods=1),
            content_type="application/yaml",
        )
        assert response.status_code == 201, response.content
        # Answered before any admission: the request only stored and queued it.
        assert response.json()["objects"][0]["phase"] == "Pending"


def submit_and_admit(settings, submitter, start_worker):
    """Four submissions answered Pending; a worker admits the three the quota holds."""
    settings.ACCELPLANE_ADMISSION = "worker"
    submit(submitter, SUBMISSIONS)
    assert not Workload.objects.exclude(phase=Workload.Phase.PENDING).exists()
    # Nor did it number its events: the settle it queued will.
    assert Event.objects.filter(kind="workload.submitted", seq=None).count() == SUBMISSIONS

    start_worker(ACCELPLANE_ADMISSION="worker")

    def admitted():
        return Workload.objects.filter(phase=Workload.Phase.ADMITTED).count() == 3

    wait_for(
        admitted, ADMITTED_WITHIN, "three of four admitted by the worker", start_worker.log_tails
    )


def test_submissions_answer_pending_and_a_worker_admits_them_within_quota(
    settings, submitter, start_worker
):
    submit_and_admit(settings, submitter, start_worker)
    # The last does not fit the quota the first three hold: it waits, it is not over-admitted.
    assert Workload.objects.get(owner__name="train-3").phase == Workload.Phase.PENDING
    assert Event.objects.filter(kind="workload.admitted").count() == 3


def test_the_worker_numbers_the_events_the_submissions_left_to_it(
    settings, submitter, start_worker
):
    submit_and_admit(settings, submitter, start_worker)

    wait_for(all_numbered, 10, "every event numbered", start_worker.log_tails)
    # In the order they were written: the submissions' before the admissions they led to.
    seqs = list(Event.objects.order_by("pk").values_list("seq", flat=True))
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    kinds = list(Event.objects.order_by("seq").values_list("kind", flat=True))
    assert kinds.index("workload.admitted") > max(
        i for i, kind in enumerate(kinds) if kind == "workload.submitted"
    )


def test_a_parked_workload_is_requeued_a_second_after_capacity_is_released(
    settings, submitter, start_worker
):
    submit_and_admit(settings, submitter, start_worker)
    last = Workload.objects.get(owner__name="train-3")
    assert last.parked_release is not None  # inadmissible: parked until a requeue
    first = Workload.objects.get(owner__name="train-0")

    released_after = timezone.now()
    response = submitter.delete(f"/api/v1/workloads/{first.owner_id}")
    assert response.status_code == 204, response.content

    def requeued_and_admitted():
        return Workload.objects.filter(pk=last.pk, phase=Workload.Phase.ADMITTED).exists()

    # The deletion's own run (0.2 s after it) leaves train-3 parked; the requeue a second
    # after the release admits it, as Kueue's requeuer would.
    wait_for(requeued_and_admitted, REQUEUED_WITHIN, "train-3 admitted", start_worker.log_tails)
    last.refresh_from_db()
    assert last.admitted_at >= released_after + parking.REQUEUE_BATCH


def test_the_worker_numbers_the_events_of_a_submission_it_cannot_admit(
    settings, submitter, start_worker
):
    """Its run records nothing of its own (the workload waits): it numbers what it was left."""
    settings.ACCELPLANE_ADMISSION = "worker"
    too_big = job("too-big", pods=4, gpus=2)  # 8 GPUs of a 6-GPU queue
    response = submitter.post(
        f"/api/v1/workloads?namespace={NAMESPACE}", too_big, content_type="application/yaml"
    )
    assert response.status_code == 201, response.content
    assert Event.objects.filter(seq=None).exists()

    start_worker(ACCELPLANE_ADMISSION="worker")

    wait_for(all_numbered, ADMITTED_WITHIN, "every event numbered", start_worker.log_tails)
    assert Workload.objects.get().phase == Workload.Phase.PENDING


def test_a_settle_run_numbers_its_events_and_those_left_to_it_once(
    settings, submitter, gpu_queues, monkeypatch
):
    """Not after each of its commits (the admission's, the simulated cluster's rounds'): seven
    statements each. Here the run is called in this process, as the worker calls it."""
    settings.ACCELPLANE_ADMISSION = "worker"
    monkeypatch.setattr(tasks, "_settle_once", lambda *args, **kwargs: None)
    submit(submitter, SUBMISSIONS)

    with CaptureQueriesContext(connection) as captured:
        tasks.settle_cluster(gpu_queues.pk)

    assert Workload.objects.filter(phase=Workload.Phase.ADMITTED).count() == 3
    assert all_numbered()
    numberings = [q for q in captured.captured_queries if "SET seq = numbered.seq" in q["sql"]]
    assert len(numberings) == 1
    seqs = list(Event.objects.order_by("pk").values_list("seq", flat=True))
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # in the order written
