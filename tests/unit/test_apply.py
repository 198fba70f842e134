"""`kubectl apply` through `workloads.services.apply`: create, no-op, scale, and all-or-nothing."""

from __future__ import annotations

import pytest
import yaml

from events.models import Event
from tests.support import GPU_QUEUES, NAMESPACE, URGENT_CLASS, at, deployment, job, row_counts
from workloads import live, services
from workloads.manifests import ManifestError
from workloads.models import (
    CapacityRelease,
    ClusterQueue,
    KubeObject,
    LocalQueue,
    PriorityClass,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
)


def apply(cluster, text, now=None, source="request.yaml"):
    return services.apply(cluster, text, source=source, now=now or at(), namespace=NAMESPACE)


def actions(results):
    return {result.key: result.action for result in results}


def edited(manifest, change):
    """`manifest` (one YAML document) with `change(body)` applied to its parsed body."""
    body = yaml.safe_load(manifest)
    change(body)
    return yaml.safe_dump(body, sort_keys=False)


def documents(*texts):
    return "---\n".join(texts)


def last_event_id():
    latest = Event.objects.order_by("-id").first()
    return latest.pk if latest else 0


def assert_only_the_refusal_was_recorded(counts_before, event_before):
    """Every table as it was, except the one `workload.rejected` event that reports the refusal."""
    counts = row_counts()
    event_counts = counts.pop("events.Event"), counts_before.pop("events.Event")
    assert counts == counts_before
    new_events = Event.objects.filter(id__gt=event_before).values_list("kind", flat=True)
    assert list(new_events) == ["workload.rejected"]
    assert event_counts[0] == event_counts[1] + 1


def test_apply_creates_every_queue_object_and_reports_it_created(cluster):
    results = services.apply(cluster, GPU_QUEUES, source="queues.yaml", now=at())

    assert actions(results) == {
        "ResourceFlavor/l4": "created",
        "ClusterQueue/gpu-queue": "created",
        "LocalQueue/llm/team-llm": "created",
        "PriorityClass/low": "created",
        "PriorityClass/high": "created",
        "WorkloadPriorityClass/batch": "created",
    }
    assert ResourceFlavor.objects.filter(cluster=cluster, name="l4").exists()
    assert ClusterQueue.objects.filter(cluster=cluster, name="gpu-queue").exists()
    assert LocalQueue.objects.get(cluster=cluster, name="team-llm").namespace == NAMESPACE
    assert PriorityClass.objects.get(cluster=cluster, name="high").value == 100
    assert WorkloadPriorityClass.objects.get(cluster=cluster, name="batch").value == 5


def test_apply_creates_one_workload_per_deployment_replica(gpu_queues):
    results = apply(gpu_queues, deployment(replicas=2))

    assert actions(results) == {"Deployment/llm/inference": "created"}
    obj = KubeObject.objects.get(cluster=gpu_queues, kind="Deployment", name="inference")
    rows = list(obj.workloads.all())
    assert len(rows) == 2
    assert {(w.namespace, w.queue_name, w.priority) for w in rows} == {(NAMESPACE, "team-llm", 100)}


def test_apply_creates_one_workload_for_a_job_of_several_pods(gpu_queues):
    apply(gpu_queues, job(pods=2))

    obj = KubeObject.objects.get(cluster=gpu_queues, kind="Job", name="finetune")
    (row,) = obj.workloads.all()
    assert row.pod_sets[0]["count"] == 2
    assert row.priority == 10


def test_applying_the_same_manifests_again_changes_nothing(gpu_queues):
    request = documents(deployment(replicas=2), job())
    apply(gpu_queues, request)
    before = row_counts()
    last_event = Event.objects.latest("id").pk

    again = apply(gpu_queues, request, now=at(minutes=5))
    queues_again = services.apply(gpu_queues, GPU_QUEUES, source="queues.yaml", now=at(minutes=5))

    assert set(actions(again).values()) == {"unchanged"}
    assert set(actions(queues_again).values()) == {"unchanged"}
    # Five minutes on, the pods have become ready: the simulated cluster's own news only.
    news = Event.objects.filter(pk__gt=last_event).values_list("kind", flat=True)
    assert set(news) <= {live.PODS, live.PROGRESS}
    # The queues' releases of capacity, noted by the first apply, were due: counted.
    assert not CapacityRelease.objects.exists()
    # The requeue put the parked workloads back in their queue and the next run parked them
    # again: listed in a set of the new count, their rows as they were.
    ignored = {"events.Event": 0, "workloads.CapacityRelease": 0, "workloads.ParkedSet": 0}
    assert {**row_counts(), **ignored} == {**before, **ignored}


def test_a_changed_replica_count_scales_the_deployment_it_created(gpu_queues):
    apply(gpu_queues, deployment(replicas=1))
    obj = KubeObject.objects.get(cluster=gpu_queues, kind="Deployment", name="inference")
    (first,) = obj.workloads.all()

    results = apply(gpu_queues, deployment(replicas=3), now=at(minutes=1))

    assert actions(results) == {"Deployment/llm/inference": "configured"}
    assert KubeObject.objects.filter(kind="Deployment").get().pk == obj.pk
    assert obj.workloads.count() == 3
    assert obj.workloads.filter(pk=first.pk, phase=Workload.Phase.ADMITTED).exists()


def test_a_lowered_replica_count_removes_workloads(gpu_queues):
    apply(gpu_queues, deployment(replicas=3))

    apply(gpu_queues, deployment(replicas=1), now=at(minutes=1))

    obj = KubeObject.objects.get(cluster=gpu_queues, kind="Deployment", name="inference")
    assert obj.workloads.count() == 1
    assert obj.pods.count() == 1


def _invalid_quantity(body):
    body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"


def _malformed_queue_name(body):
    # Kueue's webhook checks the label's format only; a missing LocalQueue is accepted.
    body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "not a name"


def _missing_workload_priority_class(body):
    body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "no-such-class"


BAD_LAST_DOCUMENTS = {
    "invalid quantity": (
        edited(job(), _invalid_quantity),
        "spec.template.spec.containers[0].resources.requests.cpu",
    ),
    "unknown kind": ("apiVersion: v1\nkind: Gizmo\nmetadata:\n  name: gizmo\n", "kind"),
    "malformed queue-name label": (
        edited(job(), _malformed_queue_name),
        "metadata.labels[kueue.x-k8s.io/queue-name]",
    ),
    "missing WorkloadPriorityClass": (
        edited(job(), _missing_workload_priority_class),
        "metadata.labels[kueue.x-k8s.io/priority-class]",
    ),
}


@pytest.mark.parametrize(
    ("bad", "field"), list(BAD_LAST_DOCUMENTS.values()), ids=list(BAD_LAST_DOCUMENTS)
)
def test_a_bad_last_document_stores_nothing_from_the_request(gpu_queues, bad, field):
    before, event_before = row_counts(), last_event_id()

    with pytest.raises(ManifestError):
        apply(gpu_queues, documents(URGENT_CLASS, deployment(replicas=2), bad))

    assert_only_the_refusal_was_recorded(before, event_before)


@pytest.mark.parametrize(
    ("bad", "field"), list(BAD_LAST_DOCUMENTS.values()), ids=list(BAD_LAST_DOCUMENTS)
)
def test_a_bad_last_document_is_named_by_file_document_and_field(gpu_queues, bad, field):
    with pytest.raises(ManifestError) as caught:
        apply(gpu_queues, documents(URGENT_CLASS, deployment(replicas=2), bad))

    error = caught.value
    assert (error.source, error.document, error.path) == ("request.yaml", 3, field)
    assert str(error).startswith("request.yaml, document 3")
    assert field in str(error)


def _set(path, value):
    def change(body):
        *parents, last = path
        for key in parents:
            body = body[key]
        body[last] = value

    return change


CONTAINER = ("spec", "template", "spec", "containers", 0)
MALFORMED = {
    "unclosed flow sequence": "key: [unclosed\n",
    "not UTF-8": b"\xff\xfe\x00",
    "top-level list": "- a\n- b\n",
    "scalar document": "42\n",
    "broken JSON": "{",
    "JSON list of numbers": "[1, 2]",
    "no apiVersion": "kind: Job\n",
    "List whose items are not a list": "apiVersion: v1\nkind: List\nitems: 5\n",
    "spec is a list": "apiVersion: batch/v1\nkind: Job\nmetadata: {name: a}\nspec: []\n",
    "metadata is a string": edited(job(), _set(("metadata",), "x")),
    "spec is null": edited(job(), _set(("spec",), None)),
    "containers is a string": edited(job(), _set(("spec", "template", "spec", "containers"), "x")),
    "request is a mapping": edited(
        job(), _set((*CONTAINER, "resources", "requests", "cpu"), {"a": 1})
    ),
    "fractional GPU": edited(
        job(), _set((*CONTAINER, "resources", "requests", "nvidia.com/gpu"), "500m")
    ),
    "parallelism above int32": edited(job(), _set(("spec", "parallelism"), 10**12)),
    "replicas is a word": edited(deployment(), _set(("spec", "replicas"), "three")),
    "queue label is a number": edited(
        job(), _set(("metadata", "labels", "kueue.x-k8s.io/queue-name"), 7)
    ),
    "toleration key is a number": edited(
        job(), _set(("spec", "template", "spec", "tolerations"), [{"key": 5}])
    ),
    "node selector value is a number": edited(
        job(), _set(("spec", "template", "spec", "nodeSelector"), {"a": 1})
    ),
    "name too long": edited(job(), _set(("metadata", "name"), "x" * 300)),
    "startup is not a duration": edited(
        job(), _set(("metadata", "annotations", "sim.accelplane.dev/startup"), "soon")
    ),
    "total steps is not an integer": edited(
        job(), _set(("metadata", "annotations", "sim.accelplane.dev/total-steps"), "1e3")
    ),
    "unknown simulation annotation": edited(
        job(), _set(("metadata", "annotations", "sim.accelplane.dev/speed"), "fast")
    ),
}


@pytest.mark.parametrize("text", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_input_raises_only_manifest_error(gpu_queues, text):
    before, event_before = row_counts(), last_event_id()

    with pytest.raises(ManifestError):
        apply(gpu_queues, text)

    assert_only_the_refusal_was_recorded(before, event_before)


# Each of these is accepted today and then breaks the simulated clock: a step time of 0
# divides by zero in runtime.current_step, a negative checkpoint interval makes
# admission.advance loop forever, and negative total steps finish a Job before it started.
STALLING_SIMULATION = {
    "zero step time": ("sim.accelplane.dev/step-time", "0s"),
    "negative checkpoint interval": ("sim.accelplane.dev/checkpoint-every", "-10"),
    "negative total steps": ("sim.accelplane.dev/total-steps", "-5"),
}


@pytest.mark.parametrize(
    ("annotation", "value"), list(STALLING_SIMULATION.values()), ids=list(STALLING_SIMULATION)
)
def test_simulation_values_the_clock_cannot_run_are_rejected(gpu_queues, annotation, value):
    bad = edited(job(), _set(("metadata", "annotations", annotation), value))

    with pytest.raises(ManifestError) as caught:
        apply(gpu_queues, bad)

    assert caught.value.document == 1


@pytest.mark.parametrize("replicas", [-1, 2**31])
def test_scaling_to_an_invalid_replica_count_raises_manifest_error(gpu_queues, replicas):
    apply(gpu_queues, deployment(replicas=1))
    obj = KubeObject.objects.get(cluster=gpu_queues, kind="Deployment", name="inference")
    before = row_counts()

    with pytest.raises(ManifestError):
        services.scale(obj, replicas, at(minutes=1))

    assert row_counts() == before


def test_scaling_a_job_raises_manifest_error(gpu_queues):
    apply(gpu_queues, job())
    obj = KubeObject.objects.get(cluster=gpu_queues, kind="Job", name="finetune")

    with pytest.raises(ManifestError, match="spec.replicas"):
        services.scale(obj, 2, at(minutes=1))
