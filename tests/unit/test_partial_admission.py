"""Partial admission end to end: `kueue.x-k8s.io/job-min-parallelism` on a Job reaches the
scheduler, the Job runs only the pods admitted (Kueue's job controller sets its parallelism
to the admitted count, `job_controller.go` RunWithPodSetsInfo), and explain and the API say
how many that is."""

from __future__ import annotations

import yaml

from api.serializers import KueueWorkloadSerializer
from tests.support import NAMESPACE, at, job
from workloads import admission, services
from workloads.explain import explain
from workloads.models import Pod, Workload


def partial_job(pods: int, min_pods: int) -> str:
    body = yaml.safe_load(job(pods=pods, gpus=2))
    body["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] = str(min_pods)
    return yaml.safe_dump(body)


def test_a_job_that_asks_too_much_runs_the_pods_that_fit(gpu_queues):
    # 4 pods of 2 GPUs in a queue of 6 GPUs: 3 pods are admitted, and only 3 are created.
    services.apply(gpu_queues, partial_job(4, 2), source="job.yaml", now=at(), namespace=NAMESPACE)
    admission.advance(gpu_queues, at(), at(minutes=5))

    row = Workload.objects.select_related("owner", "cluster").get(owner__name="finetune")
    assert row.phase == Workload.Phase.ADMITTED
    assert [a["count"] for a in row.assignments] == [3]
    assert Pod.objects.filter(owner=row.owner).count() == 3
    assert KueueWorkloadSerializer(row).data["admitted_pods"] == {"main": 3}
    summary = explain(row, at(minutes=5))["summary"]
    assert summary.endswith("with 3 of 4 pods (partial admission)")


def test_a_job_that_fits_whole_is_admitted_whole(gpu_queues):
    services.apply(gpu_queues, partial_job(3, 1), source="job.yaml", now=at(), namespace=NAMESPACE)
    admission.advance(gpu_queues, at(), at(minutes=5))

    row = Workload.objects.select_related("owner", "cluster").get(owner__name="finetune")
    assert [a["count"] for a in row.assignments] == [3]
    assert "partial admission" not in explain(row, at(minutes=5))["summary"]
