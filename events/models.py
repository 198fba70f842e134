from __future__ import annotations

from django.db import models


class Event(models.Model):
    """Append-only log; `id` is the sequence number (assigned under the event lock).

    The cluster is kept by name: the log outlives the objects it speaks of.
    """

    at = models.DateTimeField()
    kind = models.CharField(max_length=64, db_index=True)
    cluster = models.CharField(max_length=63, blank=True, db_index=True)
    namespace = models.CharField(max_length=63, blank=True, db_index=True)
    object_key = models.CharField(max_length=400, blank=True)
    workload_name = models.CharField(max_length=253, blank=True)
    message = models.TextField()
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["id"]
        # An object's latest event of a kind (live.py's last `workload.pods` of each owner)
        # is found among that object's events, not among every event of the kind.
        indexes = [
            models.Index(fields=["cluster", "kind", "object_key", "id"], name="event_object_idx")
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} {self.object_key}"

    @property
    def seq(self) -> int:
        return int(self.pk)
