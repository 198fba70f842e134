"""The event log, in sequence order, scoped to what the caller may see."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import serializers as s
from events.filters import EventFilter, FilterError
from events.models import Event
from teams.services import request_scope
from teams.visibility import shown_events, visible_events

DEFAULT_LIMIT, MAX_LIMIT = 100, 1000


class _PageQuery(serializers.Serializer[Any]):
    after = serializers.IntegerField(min_value=0, max_value=2**63 - 1, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)


def event_page(request: Request, rows: QuerySet[Event]) -> dict[str, Any]:
    """A page of `rows` after `?after=`, as the caller may see them (other teams redacted)."""
    query = _PageQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    after, limit = query.validated_data["after"], query.validated_data["limit"]
    page = list(rows.filter(seq__gt=after).order_by("seq")[:limit])
    return {
        "events": shown_events(request_scope(request), page),
        "next_after": page[-1].seq if page else after,
    }


class EventList(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="Only events with a larger seq"),
            OpenApiParameter("limit", int, description=f"At most this many (<= {MAX_LIMIT})"),
            OpenApiParameter("type", str, description="Event kind, e.g. workload.preempted"),
            OpenApiParameter("kind", str, description="Kind of the object, e.g. ClusterQueue"),
            OpenApiParameter("namespace", str),
            OpenApiParameter("workload", str, description="Kueue workload name"),
            OpenApiParameter("cluster", str),
        ],
        responses=s.EventPageSerializer,
    )
    def get(self, request: Request) -> Response:
        try:
            where = EventFilter.parse(request.query_params)
        except FilterError as error:
            raise serializers.ValidationError({error.param: [str(error)]}) from None
        rows = where.apply(visible_events(request_scope(request)))
        return Response(event_page(request, rows))
