"""`node.changed`: a cluster's nodes were added, removed, became ready or not ready.

One event per cluster per report, whatever the number of nodes that changed (workloads.live
explains the coalescing); it says how many nodes there are, how many are ready, and names
those not ready (at most NAMED). The previous report, read back from the event log,
is what "changed" compares with.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from clusters.models import Cluster, Node
from events.models import Event
from events.services import record_event

NODES = "node.changed"
# Node names an event lists of each change (a 1,000-node pool resized lists 20 of them).
NAMED = 20


def report_nodes(cluster: Cluster, at: datetime) -> None:
    """`node.changed` if the cluster's nodes or their readiness differ from the last one."""
    rows = sorted(Node.objects.filter(cluster=cluster).values_list("name", "ready"))
    digest = hashlib.sha1(repr(rows).encode()).hexdigest()
    before = (
        Event.objects.filter(cluster=cluster.name, kind=NODES, object_key="")
        .order_by("-id")
        .values_list("data", flat=True)
        .first()
    )
    if before is not None and before.get("digest") == digest:
        return
    if before is None and not rows:
        return
    ready = [name for name, is_ready in rows if is_ready]
    not_ready = [name for name, is_ready in rows if not is_ready]
    message = f"{len(rows)} node{'s' if len(rows) != 1 else ''}, {len(ready)} ready"
    if not_ready:
        message += f"; not ready: {', '.join(not_ready[:NAMED])}"
        message += f" and {len(not_ready) - NAMED} more" if len(not_ready) > NAMED else ""
    record_event(
        NODES,
        at=at,
        message=message,
        cluster=cluster.name,
        nodes=len(rows),
        ready=len(ready),
        not_ready=not_ready[:NAMED],
        digest=digest,
    )
