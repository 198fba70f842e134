from __future__ import annotations

from django.db import models
from django.db.models import Q


class Event(models.Model):
    """Append-only log, read in `seq` order.

    `seq` is given to committed events only, in the order they committed
    (`events.services`): a reader that has seen seq N never later finds a smaller one appear,
    and the numbers have no gaps. Until then it is NULL and the row is its writer's alone; `id`
    orders a transaction's reads of its own events.

    The cluster is kept by name: the log outlives the objects it speaks of.
    """

    seq = models.BigIntegerField(null=True, unique=True)
    at = models.DateTimeField()
    # Indexed by `event_kind_idx` below, for the audit log's prefix ("audit.") too.
    kind = models.CharField(max_length=64)
    # Indexed by the two indexes below, which lead with it. The log is the busiest table to
    # write: each index costs every event.
    cluster = models.CharField(max_length=63, blank=True)
    namespace = models.CharField(max_length=63, blank=True)
    object_key = models.CharField(max_length=400, blank=True)
    workload_name = models.CharField(max_length=253, blank=True)
    message = models.TextField()
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["id"]
        # An object's latest event of a kind (live.py's last `workload.pods` of each owner)
        # is found among that object's events, not among every event of the kind.
        indexes = [
            models.Index(fields=["cluster", "kind", "object_key", "id"], name="event_object_idx"),
            # Its events of a kind since an instant (live.py's recent `workload.progress` of each
            # running job) without reading the older ones, however long the job ran; and, by its
            # first two columns, an object's events of any kind (its timeline and API page).
            # The one above keeps serving "the latest by id".
            models.Index(
                fields=["cluster", "object_key", "kind", "at"], name="event_object_at_idx"
            ),
            # A team's events (equality only: no LIKE index, as `db_index` would add).
            models.Index(fields=["namespace"], name="event_namespace_idx"),
            # One index, not db_index's two on PostgreSQL: its pattern operators serve the
            # audit log's prefix (LIKE 'audit.%') and equality alike. Elsewhere a plain one.
            models.Index(fields=["kind"], name="event_kind_idx", opclasses=["varchar_pattern_ops"]),
            # The sequencer's work list: a handful of rows at any time, however long the log.
            models.Index(fields=["id"], condition=Q(seq__isnull=True), name="event_unnumbered_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} {self.object_key}"
