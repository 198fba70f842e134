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
NUMBER_IN_PLACE = services.NUMBER_IN_PLACE_FROM


class Writer(threading.Thread):
    """Records one event in its own transaction, holding it open until `release` is set."""

    def __init__(self, kind, release=None):
        super().__init__()
        self.kind, self.release = kind, release
        self.recorded = threading.Event()
        self.event = None
        self.error = None

    def run(self):
        try:
            with transaction.atomic():
                self.event = record_event(self.kind, at=timezone.now(), message=self.kind)
                self.recorded.set()
                if self.release is not None:
                    self.release.wait(10)
        except Exception as error:  # reported by the test, not lost in the thread
            self.error = error
        finally:
            connection.close()


def numbered():
    return list(numbered_events().order_by("seq").values_list("kind", "seq"))


def test_a_writer_does_not_wait_for_an_open_one_and_seqs_follow_the_commits():
    release = threading.Event()
    earlier, later = Writer("earlier", release), Writer("later")
    earlier.start()
    assert earlier.recorded.wait(10)

    later.start()
    later.join(10)
    later_finished_first = not later.is_alive()
    visible_while_earlier_is_open = numbered()
    release.set()
    earlier.join(10)

    assert (earlier.error, later.error) == (None, None)
    assert later_finished_first
    assert visible_while_earlier_is_open == [("later", later.event.seq)]
    # Numbered when it committed: after what a reader has seen, and with no gap.
    assert numbered() == [("later", later.event.seq), ("earlier", later.event.seq + 1)]


class BatchWriter(Writer):
    """Records a batch numbered in place, which holds the event log's lock until its commit."""

    def run(self):
        try:
            with transaction.atomic():
                at = timezone.now()
                batch = [new_event(self.kind, at=at, message="") for _ in range(NUMBER_IN_PLACE)]
                self.event = record_events(batch)[-1]
                self.recorded.set()
                self.release.wait(10)
        except Exception as error:
            self.error = error
        finally:
            connection.close()


def test_a_writer_finding_the_lock_taken_leaves_its_events_to_the_holder_and_does_not_wait():
    release = threading.Event()
    holder, writer = BatchWriter("admitted", release), Writer("submitted")
    holder.start()
    assert holder.recorded.wait(10)

    writer.start()
    writer.join(10)
    returned_while_the_lock_was_held = not writer.is_alive()
    release.set()
    holder.join(10)

    assert (holder.error, writer.error) == (None, None)
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
