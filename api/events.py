"""The event log, in sequence order, scoped to what the caller may see."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import serializers as s
from api.audit import AUDIT_PREFIX
from events.models import Event
from events.services import serialize
from teams.services import Scope, request_scope

DEFAULT_LIMIT, MAX_LIMIT = 100, 1000


class _PageQuery(serializers.Serializer[Any]):
    after = serializers.IntegerField(min_value=0, max_value=2**63 - 1, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)


def event_page(request: Request, rows: QuerySet[Event]) -> dict[str, Any]:
    query = _PageQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    after, limit = query.validated_data["after"], query.validated_data["limit"]
    page = list(rows.filter(id__gt=after).order_by("id")[:limit])
    return {
        "events": [serialize(e) for e in page],
        "next_after": page[-1].seq if page else after,
    }


# A refused manifest without a namespace may be another team's.
PRIVATE_CLUSTER_EVENTS = frozenset({"workload.rejected"})


def visible_events(caller: Scope) -> QuerySet[Event]:
    """Admins see every event; team members their namespaces' and the cluster-scoped ones
    (clusters, node pools, queues), which concern everyone; audit events are for admins."""
    if caller.everything:
        return Event.objects.all()
    cluster_scoped = (
        Q(namespace="") & ~Q(kind__in=PRIVATE_CLUSTER_EVENTS) & ~Q(kind__startswith=AUDIT_PREFIX)
    )
    return Event.objects.filter(Q(namespace__in=caller.readable) | cluster_scoped)


def is_visible(caller: Scope, event: dict[str, Any]) -> bool:
    """`visible_events` for one serialized event."""
    if caller.everything:
        return True
    if event["namespace"]:
        return event["namespace"] in caller.readable
    return event["kind"] not in PRIVATE_CLUSTER_EVENTS and not event["kind"].startswith(
        AUDIT_PREFIX
    )


class EventList(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="Only events with a larger seq"),
            OpenApiParameter("limit", int, description=f"At most this many (<= {MAX_LIMIT})"),
            OpenApiParameter("type", str, description="Event kind, e.g. workload.preempted"),
            OpenApiParameter("namespace", str),
            OpenApiParameter("workload", str, description="Kueue workload name"),
            OpenApiParameter("cluster", str),
        ],
        responses=s.EventPageSerializer,
    )
    def get(self, request: Request) -> Response:
        rows = visible_events(request_scope(request))
        filters = {
            "kind": request.query_params.get("type"),
            "namespace": request.query_params.get("namespace"),
            "workload_name": request.query_params.get("workload"),
            "cluster": request.query_params.get("cluster"),
        }
        rows = rows.filter(**{k: v for k, v in filters.items() if v is not None})
        return Response(event_page(request, rows))
