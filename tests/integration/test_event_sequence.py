"""On PostgreSQL, event writers commit in seq order: readers never see a gap fill in later."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from events.models import Event
from events.services import record_event

pytestmark = pytest.mark.django_db(transaction=True)

# Long enough for an unblocked writer to insert and commit one event.
UNBLOCKED_WRITE_SECONDS = 0.3


class Writer(threading.Thread):
    """Records one event in its own transaction, holding it open until `release` is set."""

    def __init__(self, kind, release=None):
        super().__init__()
        self.kind, self.release = kind, release
        self.recorded = threading.Event()
        self.seq = None
        self.error = None

    def run(self):
        try:
            with transaction.atomic():
                self.seq = record_event(self.kind, at=timezone.now(), message=self.kind).seq
                self.recorded.set()
                if self.release is not None:
                    self.release.wait(10)
        except Exception as error:  # reported by the test, not lost in the thread
            self.error = error
        finally:
            connection.close()


def test_a_later_writer_waits_until_the_earlier_seq_commits():
    release = threading.Event()
    earlier, later = Writer("earlier", release), Writer("later")
    earlier.start()
    assert earlier.recorded.wait(10)

    later.start()
    later.join(UNBLOCKED_WRITE_SECONDS)
    visible_while_earlier_is_open = list(Event.objects.values_list("kind", flat=True))
    later_was_waiting = later.is_alive()
    release.set()
    earlier.join(10)
    later.join(10)

    assert (earlier.error, later.error) == (None, None)
    assert visible_while_earlier_is_open == []
    assert later_was_waiting
    assert earlier.seq < later.seq
