"""Live events of pods, nodes and training progress (workloads/live.py): coalesced per round,
with the counts the pages show, and seen only by the teams that may see the workload."""

from __future__ import annotations

from collections import Counter

import yaml

from clusters.live import NODES, report_nodes
from events.models import Event
from events.services import serialize
from teams.services import Scope
from teams.visibility import is_visible, visible_events
from tests.support import NAMESPACE, at, deployment, job
from workloads import admission, checkpoints, live, runtime, services, status
from workloads.models import KubeObject, Pod

COUNTS = ("pods", "bound", "running", "ready")


def apply(cluster, text, now, namespace=NAMESPACE):
    return services.apply(cluster, text, source="w.yaml", now=now, namespace=namespace)


def events(kind, **where):
    return list(Event.objects.filter(kind=kind, **where).order_by("id"))


def counts(event):
    return tuple(event.data[c] for c in COUNTS)


def test_a_jobs_pods_binding_then_becoming_ready_make_one_event_each_round(gpu_queues):
    apply(gpu_queues, job(pods=2, startup="60s"), at())
    admission.advance(gpu_queues, at(), at(minutes=3))

    pods = events(live.PODS, object_key="Job/llm/finetune")
    # Bound together in one round, ready together a minute later: two events, not four.
    assert [(e.at, counts(e)) for e in pods] == [
        (at(), (2, 2, 0, 0)),
        (at(minutes=1), (2, 2, 2, 2)),
    ]
    assert pods[-1].workload_name == KubeObject.objects.get(name="finetune").workloads.get().name
    assert pods[-1].message == "2 of 2 pods running, 2 ready, 2 bound to nodes"
    # The pages' status says the same as the latest event.
    assert status.object_status(KubeObject.objects.get(name="finetune"))["running"] == 2


def test_a_round_with_many_pods_of_many_owners_makes_a_bounded_number_of_events(
    gpu_queues, settings
):
    """Past ACCELPLANE_LIVE_OWNER_EVENTS owners in a round, the rest are summed per namespace."""
    settings.ACCELPLANE_LIVE_OWNER_EVENTS = 3
    # Eight Deployments outside Kueue (no GPUs: they all fit), four pods each: 32 pods.
    manifests = [
        yaml.safe_load(deployment(f"web-{i}", replicas=4, gpus=0, queue=None)) for i in range(8)
    ]
    apply(gpu_queues, yaml.safe_dump_all(manifests), at())
    admission.advance(gpu_queues, at(), at(minutes=2))

    rounds = Counter(e.at for e in events(live.PODS))
    assert rounds == {at(): 4, at(seconds=30): 4}  # bound, then ready: 3 named + 1 summed
    ready = events(live.PODS, at=at(seconds=30))
    named = [e for e in ready if e.object_key]
    assert [e.object_key for e in named] == [f"Deployment/llm/web-{i}" for i in range(3)]
    assert all(counts(e) == (4, 4, 4, 4) for e in named)
    (summed,) = [e for e in ready if not e.object_key]
    assert summed.namespace == NAMESPACE
    assert summed.data["workloads"] == 5
    assert counts(summed) == (20, 20, 20, 20)
    assert Pod.objects.filter(ready=True).count() == 32


def test_pods_reported_from_the_rows_are_reported_once_until_they_change_again(gpu_queues):
    """How a real cluster's mirrored pods are reported (the live tick): only what changed."""
    apply(gpu_queues, deployment(replicas=2, startup="30s"), at())
    admission.advance(gpu_queues, at(), at(minutes=1))
    before = Event.objects.filter(kind=live.PODS).count()

    live.report_pods(gpu_queues, at(minutes=2))
    assert Event.objects.filter(kind=live.PODS).count() == before  # nothing changed

    pod = Pod.objects.filter(owner__name="inference").first()
    Pod.objects.filter(pk=pod.pk).update(ready=False)  # a readiness probe fails
    live.report_pods(gpu_queues, at(minutes=3))
    live.report_pods(gpu_queues, at(minutes=4))
    (changed,) = events(live.PODS, at__gte=at(minutes=2))
    assert changed.object_key == "Deployment/llm/inference"
    assert counts(changed) == (2, 2, 1, 1)


def test_training_progress_is_reported_at_most_every_window_and_at_each_checkpoint(
    gpu_queues, settings
):
    settings.ACCELPLANE_PROGRESS_EVENT_SECONDS = 30
    apply(gpu_queues, job(pods=1, startup="10s", step_time="5s", checkpoint_every=20), at())
    # The live tick settles every 5 s: far more rounds than progress events.
    for second in range(0, 241, 5):
        admission.settle(gpu_queues, at(seconds=second))

    progress = events(live.PROGRESS, object_key="Job/llm/finetune")
    saved = {e.at: e.data["step"] for e in events("checkpoint.saved")}
    assert list(saved.values()) == [20, 40]  # steps every 5 s from 00:10: 20 at 01:50
    for event in progress:
        assert event.data["checkpoint_step"] == max(
            (step for when, step in saved.items() if when <= event.at), default=0
        )
    # Training starts at 00:10 at step 0; a checkpoint round always reports.
    assert progress[0].at == at(seconds=10)
    assert progress[0].data["step"] == 0
    assert set(saved) <= {e.at for e in progress}
    times = [e.at for e in progress if e.at not in saved]
    assert all((b - a).total_seconds() >= 30 for a, b in zip(times, times[1:], strict=False))
    assert 8 <= len(progress) < 49  # one per 30 s of 230 s, plus checkpoints; not per round
    assert progress[-1].data["step"] == 46
    assert progress[-1].message == "training at step 46; latest checkpoint step 40"


def test_the_checkpoint_step_has_one_source(gpu_queues):
    apply(gpu_queues, job(pods=1, startup="10s", step_time="5s", checkpoint_every=20), at())
    admission.advance(gpu_queues, at(), at(minutes=3))
    finetune = KubeObject.objects.get(name="finetune")
    row = finetune.workloads.get()
    latest = checkpoints.latest_steps([finetune.pk])[finetune.pk]
    assert (
        latest == checkpoints.latest_step(row) == status.object_status(finetune)["checkpointStep"]
    )
    assert events(live.PROGRESS)[-1].data["checkpoint_step"] == latest


def test_pods_and_progress_events_are_seen_only_by_teams_that_may_read_the_namespace(
    gpu_queues,
):
    apply(gpu_queues, job(pods=2, startup="10s", step_time="5s"), at())
    admission.advance(gpu_queues, at(), at(minutes=1))
    llm = Scope(False, frozenset({"llm"}), frozenset())
    vision = Scope(False, frozenset({"vision"}), frozenset())
    kinds = (live.PODS, live.PROGRESS)
    mine = list(visible_events(llm).filter(kind__in=kinds))
    assert {e.kind for e in mine} == set(kinds)
    assert not visible_events(vision).filter(kind__in=kinds).exists()
    assert all(not is_visible(vision, serialize(e)) for e in mine)
    assert all(is_visible(llm, serialize(e)) for e in mine)


def test_a_node_pool_or_a_node_turning_not_ready_makes_one_node_event_for_everyone(cluster):
    """Cluster-scoped (no namespace): every team sees node.changed, as node_pool events."""
    (created,) = events(NODES)
    assert (created.data["nodes"], created.data["ready"]) == (3, 3)
    report_nodes(cluster, at(minutes=1))  # unchanged: nothing
    assert len(events(NODES)) == 1
    cluster.nodes.filter(name=cluster.nodes.first().name).update(ready=False)
    report_nodes(cluster, at(minutes=2))
    latest = events(NODES)[-1]
    assert (latest.data["nodes"], latest.data["ready"]) == (3, 2)
    assert latest.data["not_ready"] == [cluster.nodes.get(ready=False).name]
    nobody = Scope(False, frozenset(), frozenset())
    assert is_visible(nobody, serialize(latest))


def test_a_long_unticked_pause_records_only_the_latest_checkpoints(gpu_queues):
    """A live cluster nobody ticked for a day catches up in one round: it records the newest
    CATCH_UP_CHECKPOINTS checkpoints, not every one the job would have saved meanwhile."""
    apply(gpu_queues, job(pods=1, startup="10s", step_time="1s", checkpoint_every=1), at())
    admission.advance(gpu_queues, at(), at(seconds=20))
    finetune = KubeObject.objects.get(name="finetune")
    assert list(finetune.checkpoints.values_list("step", flat=True).order_by("step")) == list(
        range(1, 11)
    )  # training from 00:10, a step a second

    admission.settle(gpu_queues, at(minutes=24 * 60))

    reached = 24 * 3600 - 10
    caught_up = list(range(reached - runtime.CATCH_UP_CHECKPOINTS + 1, reached + 1))
    steps = list(finetune.checkpoints.values_list("step", flat=True).order_by("step"))
    assert steps == list(range(1, 11)) + caught_up
