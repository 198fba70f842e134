"""On PostgreSQL, events are numbered as they commit: writers of a few events do not wait for
each other, a reader never sees a gap fill in later, and an event committed before another was
written is numbered before it."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from events import services
from events.models import Event
from events.services import new_event, numbered_events, record_event, record_events

pytestmark = pytest.mark.django_db(transaction=True)


class Writer(threading.Thread):
    """Records `batch` events in its own transaction, holding it open until `release` is set;
    a batch of NUMBER_IN_PLACE is numbered as it is written, under the event log's lock."""

    def __init__(self, kind, release=None, batch=1):
        super().__init__()
        self.kind, self.release, self.batch = kind, release, batch
        self.recorded = threading.Event()
        self.event = None  # the last one
        self.error = None

    def run(self):
        try:
            with transaction.atomic():
                at = timezone.now()
                events = [new_event(self.kind, at=at, message=self.kind) for _ in range(self.batch)]
                self.event = record_events(events)[-1]
                self.recorded.set()
                if self.release is not None:
                    self.release.wait(10)
        except Exception as error:  # reported by the test, not lost in the thread
            self.error = error
        finally:
            connection.close()


def while_open(first, second, meanwhile=lambda: None):
    """`second` run to its end while `first` holds its transaction open, then `first` let
    commit: whether `second` ended while `first` was open, and what `meanwhile` returned then."""
    first.start()
    assert first.recorded.wait(10)
    second.start()
    second.join(10)
    ended = not second.is_alive()
    seen = meanwhile()
    first.release.set()
    first.join(10)
    assert (first.error, second.error) == (None, None)
    return ended, seen


def numbered():
    return list(numbered_events().order_by("seq").values_list("kind", "seq"))


def test_a_writer_does_not_wait_for_an_open_one_and_seqs_follow_the_commits():
    earlier, later = Writer("earlier", threading.Event()), Writer("later")

    later_finished_first, visible_while_earlier_is_open = while_open(earlier, later, numbered)

    assert later_finished_first
    assert visible_while_earlier_is_open == [("later", later.event.seq)]
    # Numbered when it committed: after what a reader has seen, and with no gap.
    assert numbered() == [("later", later.event.seq), ("earlier", later.event.seq + 1)]


def test_a_writer_finding_the_lock_taken_leaves_its_events_to_the_holder_and_does_not_wait():
    holder = Writer("admitted", threading.Event(), batch=services.NUMBER_IN_PLACE_FROM)
    writer = Writer("submitted")

    returned_while_the_lock_was_held, _ = while_open(holder, writer)

    assert returned_while_the_lock_was_held
    assert writer.event.seq is None  # numbered by the holder, as it let go of the lock
    stored = Event.objects.get(pk=writer.event.pk).seq  # read without numbering anything
    assert stored == holder.event.seq + 1


def stranded(kind):
    """A committed event whose writer stopped before numbering it."""
    with transaction.atomic():
        return Event.objects.create(at=timezone.now(), kind=kind, message=kind)


@pytest.mark.parametrize(
    "batch", [1, services.NUMBER_IN_PLACE_FROM], ids=["numbered after", "numbered in place"]
)
def test_an_event_committed_before_another_was_written_is_numbered_before_it(batch):
    cause = stranded("submitted")

    with transaction.atomic():
        effects = record_events(
            [new_event("admitted", at=timezone.now(), message="") for _ in range(batch)]
        )

    cause.refresh_from_db()
    assert [cause.seq] + [e.seq for e in effects] == list(range(cause.seq, cause.seq + batch + 1))


def test_readers_and_beat_number_what_a_stopped_writer_left():
    first = stranded("first")
    assert numbered() == [("first", 1)]  # a reader numbers it rather than miss it

    second = stranded("second")
    assert [e.pk for e in services.number_events()] == [second.pk]
    assert numbered() == [("first", 1), ("second", 2)]
    assert first.pk < second.pk


def test_a_backlog_longer_than_a_numbering_statement_is_numbered_before_what_follows(monkeypatch):
    monkeypatch.setattr(services, "NUMBERING_BATCH", 2)
    for i in range(5):
        stranded(f"stranded.{i}")

    record_event("later", at=timezone.now(), message="")

    assert numbered() == [*((f"stranded.{i}", i + 1) for i in range(5)), ("later", 6)]
