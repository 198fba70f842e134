"""What every page needs: the caller's scope, the cluster it is about, live fragments."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from clusters.models import Cluster
from teams.services import request_scope
from web.panels import latest_seq

View = Callable[..., HttpResponse]
Parts = dict[str, Callable[[], dict[str, Any]]]


caller = request_scope


def signed_in(request: HttpRequest) -> User:
    """The caller of a view that requires a login: the actor its changes are audited under."""
    assert isinstance(request.user, User)
    return request.user


def staff_required(view: View) -> View:
    """Platform admins only; the navigation does not offer these pages to anyone else."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("only platform admins manage the platform")
        return view(request, *args, **kwargs)

    return wrapped


def cluster_named(name: str) -> Cluster:
    return get_object_or_404(Cluster, name=name)


def chosen_cluster(request: HttpRequest) -> Cluster | None:
    """`?cluster=NAME`, else the first cluster (None while there is none)."""
    name = request.GET.get("cluster")
    if name:
        return cluster_named(name)
    return Cluster.objects.order_by("name").first()


def page(
    request: HttpRequest,
    template: str,
    parts: Parts,
    context: dict[str, Any] | None = None,
    status: int = 200,
) -> HttpResponse:
    """The whole page, or with `?fragment=NAME` only that live region (web/parts/NAME.html),
    which the page script fetches when an event says the region changed."""
    # Read before the parts: an event committed while they render is replayed, never missed.
    after = latest_seq(caller(request))
    name = request.GET.get("fragment")
    if name is not None:
        if name not in parts:
            raise Http404("no such fragment")
        return render(request, f"web/parts/{name}.html", {**(context or {}), **parts[name]()})
    full: dict[str, Any] = {"after": after, "can_submit": can_submit(request), **(context or {})}
    for build in parts.values():
        full.update(build())
    return render(request, template, full, status=status)


def can_submit(request: HttpRequest) -> bool:
    scope = caller(request)
    return scope.everything or bool(scope.writable)
