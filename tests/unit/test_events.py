"""Events: row with a monotonic seq in the caller's transaction, published only once it commits."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from controlplane import bulk
from events.models import Event
from events.services import (
    EVENTS_GROUP,
    NUMBER_IN_PLACE_FROM,
    PUBLISH_CHUNK,
    new_event,
    record_event,
    record_events,
)
from tests.support import NAMESPACE, at, deployment
from workloads import services

IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


class Refused(Exception):
    pass


@pytest.fixture
def listener(settings):
    """A channel in the `events` group of a fresh in-process channel layer."""
    settings.CHANNEL_LAYERS = IN_MEMORY
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(EVENTS_GROUP, channel)
    yield layer, channel
    async_to_sync(layer.flush)()


def received(listener, timeout=0.2):
    """Every message waiting on the listener's channel (none if nothing arrives in `timeout`)."""
    layer, channel = listener

    async def drain():
        messages = []
        while True:
            try:
                messages.append(await asyncio.wait_for(layer.receive(channel), timeout))
            except TimeoutError:
                return messages

    return async_to_sync(drain)()


def note(kind):
    return record_event(kind, at=at(), message=kind, cluster="llm-cluster")


@pytest.mark.django_db(transaction=True)
def test_seq_increases_in_commit_order_without_gaps():
    committed = []
    for batch in (["a.first", "a.second"], ["b.first"], ["c.first", "c.second", "c.third"]):
        with transaction.atomic():
            recorded = [note(kind) for kind in batch]
        committed += [event.seq for event in recorded]  # given by the commit at the latest

    assert committed == list(range(committed[0], committed[0] + 6))
    assert list(Event.objects.values_list("kind", flat=True)) == [
        "a.first",
        "a.second",
        "b.first",
        "c.first",
        "c.second",
        "c.third",
    ]


def test_events_of_one_apply_are_numbered_in_the_order_they_happened(gpu_queues):
    last = Event.objects.order_by("-id").first().pk

    services.apply(gpu_queues, deployment(), source="d.yaml", now=at(), namespace=NAMESPACE)

    kinds = list(Event.objects.filter(id__gt=last).values_list("kind", flat=True))
    assert kinds[:4] == [
        "object.created",
        "workload.submitted",
        "workload.quota_reserved",
        "workload.admitted",
    ]


@pytest.mark.django_db
def test_an_event_is_published_only_after_its_transaction_commits(
    listener, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with transaction.atomic():
            event = note("workload.admitted")
        assert received(listener) == []

    # On PostgreSQL the commit numbers the event first, in a transaction of its own.
    with django_capture_on_commit_callbacks(execute=True):
        for callback in callbacks:
            callback()

    (message,) = received(listener)
    assert message["type"] == "events.created"
    (published,) = message["events"]
    assert published["seq"] == event.seq
    assert published["kind"] == "workload.admitted"


@pytest.mark.django_db
def test_events_are_published_in_seq_order(listener, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        events = [note(f"step.{i}") for i in range(3)]

    seqs = [e["seq"] for m in received(listener) for e in m["events"]]
    assert seqs == [event.seq for event in events]
    assert seqs == sorted(seqs)


@pytest.mark.django_db
def test_a_large_commit_is_published_in_bounded_messages_in_order(
    listener, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        events = record_events(
            [
                new_event(f"step.{i}", at=at(), message="", cluster="llm-cluster")
                for i in range(2 * PUBLISH_CHUNK + 1)
            ]
        )

    messages = received(listener)
    assert [len(m["events"]) for m in messages] == [PUBLISH_CHUNK, PUBLISH_CHUNK, 1]
    seqs = [e["seq"] for m in messages for e in m["events"]]
    assert seqs == [event.seq for event in events]


@pytest.mark.django_db
def test_nothing_is_published_for_a_rolled_back_transaction(
    listener, django_capture_on_commit_callbacks
):
    def record_then_refuse():
        with transaction.atomic():
            note("workload.admitted")
            raise Refused

    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(Refused):
        record_then_refuse()

    assert callbacks == []
    assert received(listener) == []
    assert not Event.objects.filter(kind="workload.admitted").exists()


def test_a_nul_character_in_a_message_is_stored_escaped(db):
    # A refusal quoting a bad manifest's value: PostgreSQL stores no NUL in text or jsonb.
    event = record_event(
        "workload.rejected",
        at=at(),
        message="spec.completionMode: contains a NUL character: 'In\x00dexed'",
        path="spec.completionMode",
        value={"bad\x00key": ["x\x00"]},
    )

    stored = Event.objects.get(pk=event.pk)
    assert stored.message == "spec.completionMode: contains a NUL character: 'In\\u0000dexed'"
    assert stored.data["value"] == {"bad\\u0000key": ["x\\u0000"]}


def test_an_event_keeps_none_of_the_callers_containers(db):
    # Stored at the end of an admission run (`deferred_events`): what the caller changes
    # meanwhile must not show.
    steps = [1, 2]
    event = new_event("workload.progress", at=at(), message="", steps=steps, pair=(1, "a"))
    steps.append(3)

    assert event.data == {"steps": [1, 2], "pair": [1, "a"]}


@pytest.mark.parametrize("count", [1, NUMBER_IN_PLACE_FROM, bulk.COPY_MIN_ROWS])
def test_recorded_events_know_their_rows(db, count):
    # Few go in unnumbered (PostgreSQL), more numbered in place, many by COPY (PostgreSQL).
    with transaction.atomic():
        events = record_events(
            [new_event("workload.admitted", at=at(), message=f"{i}") for i in range(count)]
        )
        stored = list(Event.objects.filter(kind="workload.admitted").values_list("pk", "seq"))

    assert [(e.pk, e.seq) for e in events] == stored
    assert [e.message for e in events] == [str(i) for i in range(count)]
    assert not any(e._state.adding for e in events)
