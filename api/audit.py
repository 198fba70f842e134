"""Audit events: who changed which platform object, and how it looked before and after.

The API's views and the web UI's admin forms both record them, through here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from django.utils import timezone

from api.serializers import ClusterSerializer
from clusters.models import Cluster
from events.services import record_event
from workloads import services
from workloads.manifests import Document, render
from workloads.models import QUEUE_MODELS, QueueObject

AUDIT_PREFIX = "audit."


def audit(
    request: HttpRequest,
    action: str,
    key: str,
    *,
    cluster: str = "",
    before: Any = None,
    after: Any = None,
) -> None:
    user = request.user.get_username()
    record_event(
        f"{AUDIT_PREFIX}{action}",
        at=timezone.now(),
        cluster=cluster,
        object_key=key,
        message=f"{user} {action} {key}",
        user=user,
        before=before,
        after=after,
    )


def audited_cluster(cluster: Cluster) -> dict[str, Any]:
    """A cluster as its audit events show it: settings, status and which credentials it holds,
    not its node pools (they have events of their own)."""
    shown = ClusterSerializer(cluster).data
    return {field: value for field, value in shown.items() if field != "node_pools"}


def rendered(kind: str, row: QueueObject) -> dict[str, Any]:
    """A Kueue (or priority) object's manifest in Kueue's storage version."""
    namespace = getattr(row, "namespace", None) if QUEUE_MODELS[kind].NAMESPACED else None
    return render(kind, row.name, namespace, row.spec)


def apply_queue_objects(
    request: HttpRequest,
    cluster: Cluster,
    text: str | bytes,
    *,
    source: str,
    check: Callable[[Document], None],
) -> tuple[list[services.Applied], dict[str, QueueObject]]:
    """`kubectl apply` of Kueue objects by an admin (`check` refuses other kinds), each change
    audited with the object before and after; the applied items and the stored rows by key."""
    before: dict[str, dict[str, Any] | None] = {}

    def authorize(doc: Document) -> None:
        check(doc)
        model = QUEUE_MODELS[doc.kind]
        lookup = {"namespace": doc.namespace} if model.NAMESPACED else {}
        old = model._default_manager.filter(cluster=cluster, name=doc.name, **lookup).first()
        before[doc.key] = rendered(doc.kind, old) if old else None

    applied = services.apply(cluster, text, source=source, now=timezone.now(), authorize=authorize)
    rows: dict[str, QueueObject] = {}
    # One query a kind; keyed by object, as rows of different kinds may share a pk.
    for kind in {item.kind for item in applied}:
        items = [item for item in applied if item.kind == kind]
        stored = QUEUE_MODELS[kind]._default_manager.select_related("cluster")
        by_pk = {row.pk: row for row in stored.filter(pk__in=[item.pk for item in items])}
        rows |= {item.key: by_pk[item.pk] for item in items}
    for item in applied:
        if item.action != "unchanged":
            after = rendered(item.kind, rows[item.key])
            audit(
                request,
                item.action,
                item.key,
                cluster=cluster.name,
                before=before[item.key],
                after=after,
            )
    return applied, rows
