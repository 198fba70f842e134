"""What every view needs: the caller's scope, the cluster a request is about, the clock."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS
from django.utils import timezone
from rest_framework.exceptions import APIException, NotFound, PermissionDenied, ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from clusters.models import Cluster
from controlplane.prepared import Prepared
from teams.services import request_scope
from workloads import targets


class Conflict(APIException):
    status_code = 409
    default_code = "conflict"
    default_detail = "conflicts with the current state"


def signed_in(request: Request) -> User:
    """The caller, once a permission class has made sure somebody is signed in."""
    assert isinstance(request.user, User)
    return request.user


def now() -> datetime:
    return timezone.now()


def cluster_from(request: Request) -> Cluster:
    """`?cluster=NAME`; optional while there is exactly one cluster."""
    name = request.query_params.get("cluster")
    if name:
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            raise ValidationError({"cluster": [f"no cluster named {name!r}"]})
        return cluster
    return _only_cluster(_up_to_two_clusters())


_CLUSTER_FIELDS = [field.attname for field in Cluster._meta.concrete_fields]
# Built once (controlplane/prepared.py): every submission asks, and building the query took
# a tenth of a submission's time in the web process. Unsorted: past one cluster, only their
# number matters, and sorting them costs every submission.
_UP_TO_TWO_CLUSTERS = Prepared(lambda: Cluster.objects.order_by().values_list(*_CLUSTER_FIELDS)[:2])


def _up_to_two_clusters() -> list[Cluster]:
    """Enough clusters to tell none, one and several apart."""
    return [
        Cluster.from_db(DEFAULT_DB_ALIAS, _CLUSTER_FIELDS, row)
        for row in _UP_TO_TWO_CLUSTERS.rows()
    ]


def _only_cluster(clusters: list[Cluster]) -> Cluster:
    """The only cluster, given up to two of them; else a 400 saying why."""
    if not clusters:
        raise ValidationError({"cluster": ["no cluster exists yet; an admin creates one first"]})
    if len(clusters) > 1:
        raise ValidationError({"cluster": ["several clusters exist; pass ?cluster=NAME"]})
    return clusters[0]


def cluster_for_manifests(request: Request, text: str) -> Cluster:
    """`?cluster=NAME`; without it the only cluster or, once several exist, the one cluster
    holding every LocalQueue the manifests' queue-name labels name (docs/api.md)."""
    if request.query_params.get("cluster"):
        return cluster_from(request)
    # Two tell one cluster from several, in the one query.
    clusters = _up_to_two_clusters()
    if len(clusters) < 2:
        return _only_cluster(clusters)
    choice = targets.clusters_holding_queues(
        text, source="request", namespace=request.query_params.get("namespace") or None
    )
    if len(choice.clusters) == 1:
        return choice.clusters[0]
    caller = request_scope(request)
    queues = ", ".join(choice.queues)
    if not choice.queues or not all(caller.can_read(q.split("/")[0]) for q in choice.queues):
        problem = "several clusters exist and the manifests name no LocalQueue of yours"
    elif choice.clusters:
        names = ", ".join(c.name for c in choice.clusters)
        problem = f"several clusters hold LocalQueue {queues} ({names})"
    else:
        problem = f"no cluster holds LocalQueue {queues}"
    raise ValidationError({"cluster": [f"{problem}; pass ?cluster=NAME"]})


def require_write(request: Request, namespace: str) -> None:
    """Viewers may look, not touch; outside the caller's teams the object does not exist."""
    caller = request_scope(request)
    if not caller.can_read(namespace):
        raise NotFound()
    if not caller.can_write(namespace):
        raise PermissionDenied(f"you have the viewer role in namespace {namespace!r}")


class IsAdminOrReadOnly(BasePermission):
    """Platform objects: everyone signed in reads them, platform admins (staff) change them."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not request.user.is_authenticated:
            return False
        return request.method in SAFE_METHODS or bool(request.user.is_staff)


class Pagination(LimitOffsetPagination):
    """`limit` (at most 1000) and `offset`; values beyond any table clamp instead of failing."""

    max_limit = 1000
    max_offset = 2**31

    def get_offset(self, request: Request) -> int:
        return min(super().get_offset(request), self.max_offset)
