"""Events: service -> Event row -> (after commit) channel layer -> browser."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from operator import attrgetter
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from django.db import connection, transaction
from django.db.models import QuerySet
from django.db.models.base import ModelState

from controlplane import bulk
from events.models import Event

logger = logging.getLogger(__name__)

EVENTS_GROUP = "events"
# The channel layer's message on EVENTS_GROUP: {"type": EVENTS_MESSAGE, "events": [...]},
# committed events in seq order, at most PUBLISH_CHUNK of them (a message stays small).
EVENTS_MESSAGE = "events.created"
PUBLISH_CHUNK = 100
# pg_advisory_xact_lock key, held by whoever gives events their seq until its commit: numbers
# become visible in the order they were given.
EVENTS_LOCK = 0x4556_4E54
# A batch this large is numbered as it is inserted, under the lock (as an admission run's is):
# numbering it after the commit would write each of its rows twice.
NUMBER_IN_PLACE_FROM = 100
NUMBERING_BATCH = 1000
EVENT_FIELDS = Event._meta.concrete_fields
# `new_event` sets each of them.
assert [f.attname for f in EVENT_FIELDS] == [
    *("id", "seq", "at", "kind", "cluster", "namespace", "object_key", "workload_name"),
    *("message", "data"),
], "Event's fields changed: new_event must set the new ones"
EVENT_COLUMNS = [field.name for field in EVENT_FIELDS if not field.primary_key]
_event_row = attrgetter(*EVENT_COLUMNS)


def serialize(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "at": event.at.isoformat().replace("+00:00", "Z"),
        "kind": event.kind,
        "cluster": event.cluster,
        "namespace": event.namespace,
        "object": event.object_key,
        "workload": event.workload_name,
        "message": event.message,
        "data": event.data,
    }


def lock_event_log(*, wait: bool = True) -> bool:
    """Held to commit: a reader that saw seq N never later sees a smaller seq appear. Without
    `wait`, taken only if it is free; whether it was taken."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            if not wait:
                cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [EVENTS_LOCK])
                return bool(cursor.fetchone()[0])
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [EVENTS_LOCK])
    # SQLite serialises writers already (BEGIN IMMEDIATE).
    return True


def new_event(
    kind: str,
    *,
    at: datetime,
    message: str,
    cluster: str = "",
    namespace: str = "",
    object_key: str = "",
    workload: str = "",
    **data: Any,
) -> Event:
    """An unsaved Event; `record_events` stores a batch of them.

    Built as `Model.__init__` would build it, less its walk over the fields and its `pre_init`
    and `post_init` signals (nobody listens for Event's): an admission run makes a few per
    workload, and `__init__` took most of their time."""
    event = Event.__new__(Event)
    event._state = ModelState()
    event.__dict__.update(
        id=None,
        seq=None,
        at=at,
        kind=kind,
        cluster=cluster,
        namespace=_storable(namespace),
        object_key=_storable(object_key),
        workload_name=workload,
        message=_storable(message),
        data=_storable(data),
    )
    return event


def _storable(value: Any) -> Any:
    """NUL characters escaped: PostgreSQL stores none in text or jsonb, and a refusal's
    message may quote one from a bad manifest (as `\\u0000`, how JSON writes it)."""
    if _stored_as_is(value):
        return value
    if isinstance(value, str):
        return value.replace("\x00", "\\u0000")
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


def _stored_as_is(value: Any) -> bool:
    """Whether `_storable` may give `value` itself, as it can nearly every event's data (no
    copy of it): a plain str without NUL, no container, or a dict of those. A dict is always
    `new_event`'s `**data`, its own; lists and dicts in it may be the caller's, still copied."""
    if type(value) is dict:
        return all(_leaf_as_is(k) and _leaf_as_is(v) for k, v in value.items())
    return _leaf_as_is(value)


def _leaf_as_is(value: Any) -> bool:
    if isinstance(value, str):
        return type(value) is str and "\x00" not in value  # escaping gives a plain str
    return not isinstance(value, dict | list | tuple)


_deferred = threading.local()
_numbering = threading.local()


@contextmanager
def numbered_at_the_end() -> Iterator[None]:
    """The small batches of events committed inside are numbered once, on the way out
    (`number_waiting`), rather than after each commit: a worker's settle run commits several
    transactions, and numbering after each took seven statements each time. Their events reach
    streams when the block ends. Large batches are still numbered as they are written."""
    if getattr(_numbering, "at_the_end", False):
        yield  # an outer block numbers them
        return
    _numbering.at_the_end = True
    try:
        yield
    finally:
        _numbering.at_the_end = False
        number_waiting()


@contextmanager
def deferred_events(*, numbered_later: bool = False) -> Iterator[None]:
    """Events recorded inside are inserted together on the way out, still in the caller's
    transaction: a batch numbered in place holds the event log's lock only from there to the
    commit instead of for the rest of the transaction. `numbered_later`: as `record_events`
    (an outer block decides for the events of an inner one)."""
    if getattr(_deferred, "events", None) is not None:
        yield  # an outer block writes them
        return
    _deferred.events = []
    try:
        yield
        events = _deferred.events
    finally:
        _deferred.events = None
    record_events(events, numbered_later=numbered_later)


def record_events(events: list[Event], *, numbered_later: bool = False) -> list[Event]:
    """Insert Events in the caller's transaction; once that commits they are numbered and
    published.

    On PostgreSQL a few events go in without a number and without the event log's lock, so
    that concurrent writers commit side by side, and are numbered after the commit
    (`_number_after_commit`), or, with `numbered_later`, by a run the caller has queued
    (`number_waiting`; beat's and readers' numbering if that run never comes). A large batch,
    and every batch on SQLite (whose writer is alone anyway), is numbered in place, under the
    lock, after the events committed before it.
    """
    if not events:
        return events
    pending = getattr(_deferred, "events", None)
    if pending is not None:
        pending.extend(events)
        return events
    if connection.vendor == "postgresql" and len(events) < NUMBER_IN_PLACE_FROM:
        _insert(events)
        if not (numbered_later or getattr(_numbering, "at_the_end", False)):
            transaction.on_commit(partial(_number_after_commit, events), robust=True)
        return events
    with transaction.atomic(savepoint=False):
        lock_event_log()
        # Whatever this transaction read was committed before it, and so were events still
        # unnumbered (on PostgreSQL: SQLite numbers every event as it is written).
        earlier = _number_committed() if connection.vendor == "postgresql" else []
        for number, event in enumerate(events, start=_last_seq() + 1):
            event.seq = number
        _insert(events)
        transaction.on_commit(partial(publish, [*earlier, *events]))
        if connection.vendor == "postgresql":
            transaction.on_commit(_number_left_behind, robust=True)
    return events


def number_events(*, wait: bool = True) -> list[Event]:
    """Give the committed events without a seq theirs, in the order of their ids, and publish
    them once that commits: from beat, for a writer that stopped between its commit and
    numbering its events, and from readers. Without `wait`, nothing is done while another
    numbers."""
    numbered = _numbered_in_turn(wait=wait)
    if numbered is None:
        return []
    _number_left_behind()
    return numbered


def _number_after_commit(mine: Sequence[Event]) -> None:
    """After a commit that left events unnumbered (`mine`): a writer that finds the event
    log's lock free numbers every committed event, its own and others', and gives `mine`
    their seq; one that finds it taken leaves its events to the holder and returns at once.
    Writers never queue for the lock (they did, one after another, for most of a submission's
    time under load): one numbers for many."""
    numbered = _numbered_in_turn(wait=False)
    if numbered is None:
        return
    seqs = {event.pk: event.seq for event in numbered}
    if any(event.pk not in seqs for event in mine):  # another numbered them first
        seqs.update(Event.objects.filter(pk__in=[e.pk for e in mine]).values_list("pk", "seq"))
    for event in mine:
        event.seq = seqs.get(event.pk)
    _number_left_behind()


def _number_left_behind() -> None:
    """Run by whoever lets go of the event log's lock, once it has: the events committed while
    it held the lock, whose writers found it taken and left them to it, are numbered, unless
    another has taken the lock since (and looks in turn when it lets go). That commit came
    after theirs, so this read sees them."""
    while Event.objects.filter(seq__isnull=True).exists():
        if not _numbered_in_turn(wait=False):  # another's turn (or nothing left after all)
            return


def _numbered_in_turn(*, wait: bool) -> list[Event] | None:
    """Under the event log's lock, the committed events numbered (published once that
    commits); None when `wait` is off and another holds the lock."""
    with transaction.atomic():
        if not lock_event_log(wait=wait):
            return None
        numbered = _number_committed()
        transaction.on_commit(partial(publish, numbered))
    return numbered


def _number_committed() -> list[Event]:
    """Under the event log's lock: number the unnumbered events this transaction sees
    (committed ones, and its own), NUMBERING_BATCH a statement. Ids order them: an event that
    caused another was inserted, and committed, before the other was inserted."""
    table = connection.ops.quote_name(Event._meta.db_table)
    columns = ", ".join(f"{table}.{connection.ops.quote_name(str(f.column))}" for f in EVENT_FIELDS)
    numbering = (
        f"UPDATE {table} SET seq = numbered.seq FROM ("  # noqa: S608 (no value is spliced in)
        f"SELECT id, ROW_NUMBER() OVER (ORDER BY id) + "
        f"(SELECT COALESCE(MAX(seq), 0) FROM {table}) AS seq "
        f"FROM {table} WHERE seq IS NULL ORDER BY id LIMIT %s) AS numbered "
        f"WHERE {table}.id = numbered.id RETURNING {columns}"
    )
    numbered: list[Event] = []
    with _without_bitmap_scans():
        while True:
            batch = sorted(Event.objects.raw(numbering, [NUMBERING_BATCH]), key=attrgetter("seq"))
            numbered += batch
            if len(batch) < NUMBERING_BATCH:
                return numbered


@contextmanager
def _without_bitmap_scans() -> Iterator[None]:
    """PostgreSQL: each numbered event leaves a dead entry in the index of unnumbered ones
    until a vacuum, and a bitmap scan of it visits them all every time (21 ms a submission
    after 200,000 events, with autovacuum off); a plain index scan marks them dead as it
    passes, once. For the statements inside alone (a rollback undoes it too)."""
    if connection.vendor != "postgresql":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        yield
        cursor.execute("SET LOCAL enable_bitmapscan TO DEFAULT")


def number_waiting() -> None:
    """The events still waiting for a number, numbered, unless someone is numbering already
    (who then numbers them too): those committed and left to a later run (`numbered_later`),
    or not yet numbered by their writer (it numbers right after its commit), and, in a test's
    transaction, the caller's own. One look when none waits."""
    if connection.vendor == "postgresql" and Event.objects.filter(seq__isnull=True).exists():
        number_events(wait=False)


def numbered_events() -> QuerySet[Event]:
    """The log as readers page through it, by seq. The events waiting for a number are
    numbered first (`number_waiting`), so that a read sees what was committed before it."""
    number_waiting()
    return Event.objects.filter(seq__isnull=False)


def _last_seq() -> int:
    # In SQL: each admission run asks, and the ORM took longer to build the aggregate than
    # the database (the seq index's last entry) to answer it.
    table = connection.ops.quote_name(Event._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MAX(seq) FROM {table}")  # noqa: S608
        last: int | None = cursor.fetchone()[0]
    return last or 0


def _insert(events: list[Event]) -> None:
    # Bound straight away: `bulk_create` compiled every value of every row through the ORM,
    # and most of a burst of admissions went into that.
    rows = list(map(_event_row, events))
    alias = connection.alias
    for event, pk in zip(events, _inserted_pks(events, rows), strict=True):
        event.pk = pk
        event._state.adding, event._state.db = False, alias


def _inserted_pks(events: list[Event], rows: list[tuple[Any, ...]]) -> list[int]:
    """Insert the rows of `events`; their primary keys, in order. Many numbered events on
    PostgreSQL go by COPY, which returns nothing, and are found again by their seq: the
    statements' arrays of an admission run's thousands of events took psycopg longer to quote
    than the database to insert them. Others return theirs (one statement, not two)."""
    first, last = events[0].seq, events[-1].seq
    if (
        first is None
        or last is None
        or connection.vendor != "postgresql"
        or len(rows) < bulk.COPY_MIN_ROWS
    ):
        return bulk.insert_rows_returning_pks(Event, EVENT_COLUMNS, rows)
    bulk.insert_rows(Event, EVENT_COLUMNS, rows)
    numbered = Event.objects.filter(seq__range=(first, last)).order_by("seq")
    return list(numbered.values_list("pk", flat=True))


def record_event(kind: str, *, at: datetime, message: str, **fields: Any) -> Event:
    return record_events([new_event(kind, at=at, message=message, **fields)])[0]


def publish(events: Sequence[Event]) -> None:
    """Hand committed events to the channel layer, in order; a failure is logged, never raised:
    the rows are the truth, and a browser catches up by sequence number."""
    layer = get_channel_layer()
    if layer is None or _nobody_listens(layer):
        return
    payloads = [serialize(event) for event in events]
    # A message per chunk, not per event: one PUBLISH (and one delivery to each socket) for
    # an admission run's events, where one apiece took a fifth of a worker's time under load.
    messages = [
        {"type": EVENTS_MESSAGE, "events": payloads[start : start + PUBLISH_CHUNK]}
        for start in range(0, len(payloads), PUBLISH_CHUNK)
    ]
    if isinstance(layer, InMemoryChannelLayer):
        # Its queues belong to the server's event loop: send from there.
        try:
            async_to_sync(_send)(layer, messages)
        except Exception:
            logger.exception("could not publish events %s", [e.pk for e in events])
        return
    _publisher(layer).messages.put(messages)


async def _send(layer: BaseChannelLayer, messages: list[dict[str, Any]]) -> None:
    for message in messages:
        await layer.group_send(EVENTS_GROUP, message)


class _Publisher(threading.Thread):
    """Sends events to a Redis channel layer from one event loop of its own.

    A request or task only queues them: it never waits on Redis, and the layer keeps one
    connection for this loop instead of opening one per event (async_to_sync runs each call
    in a new loop). One thread, one queue: events go out in the order they were handed over.
    """

    def __init__(self, layer: BaseChannelLayer) -> None:
        super().__init__(name="event-publisher", daemon=True)
        self.layer = layer
        self.messages: queue.SimpleQueue[list[dict[str, Any]] | None] = queue.SimpleQueue()

    def run(self) -> None:
        loop = asyncio.new_event_loop()
        while (batch := self.messages.get()) is not None:
            try:
                loop.run_until_complete(_send(self.layer, batch))
            except Exception:
                seqs = [event["seq"] for message in batch for event in message["events"]]
                logger.exception("could not publish events %s", seqs)
        loop.close()

    def drain(self, timeout: float) -> None:
        """What is queued goes out (for at most `timeout` s), then the thread ends."""
        self.messages.put(None)
        self.join(timeout)


_publishers: dict[int, _Publisher] = {}  # by process: a forked worker starts its own
_publishers_lock = threading.Lock()


def _publisher(layer: BaseChannelLayer) -> _Publisher:
    with _publishers_lock:
        publisher = _publishers.get(os.getpid())
        if publisher is None or not publisher.is_alive():
            publisher = _publishers[os.getpid()] = _Publisher(layer)
            publisher.start()
        return publisher


@atexit.register
def _drain_on_exit() -> None:
    publisher = _publishers.get(os.getpid())
    if publisher is not None and publisher.is_alive():
        publisher.drain(timeout=2.0)


def _nobody_listens(layer: object) -> bool:
    """The in-process layer can tell that no consumer joined the group: skip the send."""
    if not isinstance(layer, InMemoryChannelLayer):
        return False
    return not layer.groups.get(EVENTS_GROUP)
