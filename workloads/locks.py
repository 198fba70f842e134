"""A cluster's admission lock: one admission run (or simulated round) at a time per cluster."""

from __future__ import annotations

import zlib

from django.db import connection

from clusters.models import Cluster


def lock_admission(cluster: Cluster) -> None:
    """Serialise admission per cluster, so two workers never admit against the same quota."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            key = zlib.crc32(f"admission:{cluster.pk}".encode())
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
    # SQLite: transactions begin IMMEDIATE (settings), so writers are already serialised.
