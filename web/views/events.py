"""The event log: filtered, newest first, paged by sequence number, new events arriving live.

The rows are the REST endpoint's (`teams.visibility.visible_events`, `events.filters`), so
both show a team member the same events, redacted the same way. Audit events have a page of
their own, for platform admins.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.http import urlencode

from clusters.models import Cluster
from events.audit import AUDIT_PREFIX
from events.filters import EventFilter, FilterError
from events.models import Event
from teams.services import Scope
from teams.visibility import shown_events, visible_events
from web.views.common import caller, page, staff_required
from workloads.models import QUEUE_MODELS
from workloads.status import WORKLOAD_KINDS

PAGE_SIZE = 100
TYPE_HINT_EVENTS = 5_000
MAX_SEQ = 2**63 - 1
_SEQ = re.compile(r"[0-9]{1,19}")
# The kinds of object events are about, offered in the filter (any other may be typed).
OBJECT_KINDS = ("Cluster", "NodePool", *WORKLOAD_KINDS, *QUEUE_MODELS)


def _cursor(value: str | None) -> int | None:
    """`?before=SEQ`: only events older than SEQ (a positive integer)."""
    if not value:
        return None
    # ASCII digits only (str.isdigit() passes "²", which int() refuses), and no more than a
    # sequence number has: int() of thousands of digits raises too.
    if not _SEQ.fullmatch(value) or not 1 <= int(value) <= MAX_SEQ:
        shown = value if len(value) <= 30 else value[:30] + "…"
        raise FilterError("before", f"before {shown!r} is not an event sequence number")
    return int(value)


@login_required
def event_list(request: HttpRequest) -> HttpResponse:
    """Every event the caller may see but the audit ones, filtered by cluster, namespace,
    object kind, type and workload."""
    return _log(request, audit=False)


@staff_required
def audit_list(request: HttpRequest) -> HttpResponse:
    """Who changed which platform object: the audit events, filtered as the others."""
    return _log(request, audit=True)


def _log(request: HttpRequest, *, audit: bool) -> HttpResponse:
    scope = caller(request)
    context: dict[str, Any] = {"audit": audit, "filters": request.GET, **_choices(scope, audit)}
    try:
        where = EventFilter.parse(request.GET)
        before = _cursor(request.GET.get("before"))
    except FilterError as error:
        context.update(problem=str(error), invalid=error.param, events=[], live=False)
        return page(request, "web/events.html", {}, context, status=400)
    rows = where.apply(visible_events(scope))
    if audit:
        rows = rows.filter(kind__startswith=AUDIT_PREFIX)
    else:
        rows = rows.exclude(kind__startswith=AUDIT_PREFIX)
    if before is not None:
        rows = rows.filter(seq__lt=before)
    found = list(rows.order_by("-seq")[: PAGE_SIZE + 1])
    shown = found[:PAGE_SIZE]
    params = where.params()
    context.update(
        events=shown_events(scope, shown),
        where=params,
        # Newer events arrive on the first page only; an older page stays as it was.
        live=before is None,
        older=urlencode({**params, "before": str(shown[-1].seq)}) if shown else "",
        has_older=len(found) > PAGE_SIZE,
        newest=urlencode(params) if before is not None else None,
    )
    return page(request, "web/events.html", {}, context)


def _choices(scope: Scope, audit: bool) -> dict[str, Any]:
    return {
        "clusters": Cluster.objects.order_by("name").values_list("name", flat=True),
        "object_kinds": OBJECT_KINDS,
        "types": _types(scope, audit),
        "page_size": PAGE_SIZE,
    }


def _types(scope: Scope, audit: bool) -> QuerySet[Event, str]:
    """The event types the filter's datalist offers. An admin's: every type logged so far, one
    indexed DISTINCT however long the log. A team member's: those of the latest events it may
    see, so that no type shows because another team's workloads had one, and the page reads a
    bounded number of rows (any other type may still be typed)."""
    if scope.everything:
        audited = Event.objects.filter(kind__startswith=AUDIT_PREFIX)
        logged = audited if audit else Event.objects.exclude(pk__in=audited)
    else:
        visible = visible_events(scope).exclude(kind__startswith=AUDIT_PREFIX)
        latest = visible.order_by("-seq").values("id")[:TYPE_HINT_EVENTS]
        logged = Event.objects.filter(id__in=latest)
    return logged.order_by("kind").values_list("kind", flat=True).distinct()
