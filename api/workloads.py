"""Teams' workloads: submitted as Kubernetes manifests, then listed, scaled, explained, deleted."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import django_filters
from django.core import signing
from django.db.models import Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.authentication import get_authorization_header
from rest_framework.decorators import action
from rest_framework.exceptions import NotAuthenticated, NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from api import serializers as s
from api.common import Conflict, cluster_for_manifests, now, require_write, signed_in
from api.events import event_page
from api.parsers import MANIFEST_PARSERS, manifest_text
from clusters.models import Cluster
from events.services import numbered_events
from teams.services import request_scope
from teams.visibility import redact
from workloads import checkpoints, explain, runtime, services, whatif
from workloads.manifests import QUEUE_KINDS
from workloads.models import Checkpoint, KubeObject, Workload
from workloads.status import WORKLOAD_KINDS
from workloads.tenancy import submission_check

CLUSTER_PARAM = OpenApiParameter(
    "cluster",
    str,
    description="Cluster name; without it, the only cluster, or the one cluster holding every "
    "LocalQueue the manifests' `kueue.x-k8s.io/queue-name` labels name",
)
NAMESPACE_PARAM = OpenApiParameter(
    "namespace",
    str,
    description="For documents without one, as `kubectl apply -n` (default: default)",
)
MANIFEST_BODY = {
    "application/yaml": OpenApiTypes.STR,
    "application/json": OpenApiTypes.OBJECT,
}
CHECKPOINT_SALT = "accelplane.checkpoint"


def checkpoint_token(obj: KubeObject) -> str:
    """The token a training job reports its checkpoints with: signed with SECRET_KEY, bound to
    this object and its namespace (its team)."""
    return signing.Signer(salt=CHECKPOINT_SALT).sign(f"{obj.namespace}/{obj.pk}")


def _checkpoint_token_subject(request: Request) -> str | None:
    """The `namespace/pk` a Bearer checkpoint token was signed for; None without one."""
    parts = get_authorization_header(request).split()
    if len(parts) != 2 or parts[0].lower() != b"bearer":
        return None
    try:
        return signing.Signer(salt=CHECKPOINT_SALT).unsign(parts[1].decode(errors="replace"))
    except signing.BadSignature:
        return None


class WorkloadFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped library
    namespace = django_filters.CharFilter()
    kind = django_filters.ChoiceFilter(choices=[(k, k) for k in WORKLOAD_KINDS])
    cluster = django_filters.CharFilter(field_name="cluster__name")
    queue = django_filters.CharFilter(method="by_queue", label="LocalQueue name")
    phase = django_filters.ChoiceFilter(
        method="by_phase", choices=Workload.Phase.choices, label="Phase of a Kueue workload"
    )

    class Meta:
        model = KubeObject
        fields = ["namespace", "kind", "cluster", "queue", "phase"]

    def by_queue(self, queryset: QuerySet[KubeObject], name: str, value: str) -> Any:
        return queryset.filter(workloads__queue_name=value).distinct()

    def by_phase(self, queryset: QuerySet[KubeObject], name: str, value: str) -> Any:
        return queryset.filter(workloads__phase=value).distinct()


def _written(
    request: Request, cluster: Cluster, applied: list[services.Applied]
) -> list[KubeObject]:
    """The workload objects an apply wrote, by id, as a response shows them. Those it created
    are as it stored them, unless admission ran in the request and may have changed them (a
    worker may admit them meanwhile too: the response shows them as they were committed);
    the others are read again. Not through get_queryset: all of it is of workload kinds and in
    `cluster`, whose kind filter and join cost more than the read itself."""
    as_stored = not services.admits_in_request(cluster)
    objects, reread = [], []
    for a in applied:
        if as_stored and a.stored is not None:
            setattr(a.stored, s.WORKLOADS_ATTR, list(a.workloads))
            objects.append(a.stored)
        elif a.kind not in QUEUE_KINDS:
            reread.append(a.pk)
    if reread:
        written = KubeObject.objects.filter(pk__in=reread).prefetch_related(s.WITH_WORKLOADS)
        objects.extend(request_scope(request).filter(written))
    for obj in objects:
        obj.cluster = cluster
    return sorted(objects, key=attrgetter("pk"))


class WorkloadViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet[KubeObject],
):
    """Jobs, Deployments, JobSets and LeaderWorkerSets, each with its Kueue workloads."""

    serializer_class = s.WorkloadObjectSerializer
    filterset_class = WorkloadFilter

    def get_queryset(self) -> QuerySet[KubeObject]:
        objects = (
            # With the opaque owners of workloads submitted outside Accelplane (a RayJob, a Pod).
            KubeObject.objects.filter(Q(kind__in=WORKLOAD_KINDS) | Q(managed_elsewhere=True))
            .select_related("cluster")
            .order_by("id")
        )
        if self.action != "destroy":  # a deletion shows nothing of what it deletes
            objects = objects.prefetch_related(s.WITH_WORKLOADS)
        return request_scope(self.request).filter(objects)

    def get_parsers(self) -> list[Any]:
        # Called before DRF sets self.action: look the action up in the route's method map.
        method = (self.request.method or "").lower() if self.request is not None else ""
        if getattr(self, "action_map", {}).get(method) == "create":
            return [parser() for parser in MANIFEST_PARSERS]
        return super().get_parsers()

    @extend_schema(
        request=MANIFEST_BODY,
        parameters=[CLUSTER_PARAM, NAMESPACE_PARAM],
        responses={201: s.ApplyResultSerializer, 200: s.ApplyResultSerializer},
        description="`kubectl apply`: one or more manifests (YAML or JSON). Every document is "
        "validated and authorized before anything is stored. 201 when something was created.",
    )
    def create(self, request: Request) -> Response:
        text = manifest_text(request)
        cluster = cluster_for_manifests(request, text)
        applied = services.apply(
            cluster,
            text,
            source="request",
            now=now(),
            namespace=request.query_params.get("namespace") or None,
            authorize=submission_check(request_scope(request)),
            actor=signed_in(request),
        )
        created = any(a.action == "created" for a in applied)
        body = {
            "applied": [{"key": a.key, "action": a.action} for a in applied],
            "objects": s.WorkloadObjectSerializer(
                _written(request, cluster, applied), many=True
            ).data,
        }
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        obj = self.get_object()
        body = dict(self.get_serializer(obj).data)
        if request_scope(request).can_write(obj.namespace) and obj.kind in ("Job", "JobSet"):
            body["checkpoint_token"] = checkpoint_token(obj)
        return Response(body)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        obj = self.get_object()
        require_write(request, obj.namespace)
        services.delete(obj, now())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=s.ScaleSerializer, responses=s.WorkloadObjectSerializer)
    @action(detail=True, methods=["post"])
    def scale(self, request: Request, pk: str) -> Response:
        """`kubectl scale`: Deployments (pods) and LeaderWorkerSets (groups)."""
        obj = self.get_object()
        require_write(request, obj.namespace)
        body = s.ScaleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.scale(obj, body.validated_data["replicas"], now())
        return Response(self.get_serializer(self.get_queryset().get(pk=obj.pk)).data)

    @extend_schema(
        parameters=[OpenApiParameter("after", int), OpenApiParameter("limit", int)],
        responses=s.EventPageSerializer,
    )
    @action(detail=True, methods=["get"], filterset_class=None, pagination_class=None)
    def events(self, request: Request, pk: str) -> Response:
        obj = self.get_object()
        rows = numbered_events().filter(
            cluster=obj.cluster.name, namespace=obj.namespace, object_key=obj.key
        )
        return Response(event_page(request, rows))

    @extend_schema(methods=["GET"], responses=s.CheckpointSerializer(many=True), request=None)
    @extend_schema(
        methods=["POST"],
        request=s.CheckpointSerializer,
        responses={201: s.CheckpointSerializer},
        description="A training job reports a saved checkpoint: authenticate with the "
        "workload's `checkpoint_token` as a Bearer token, or as a submitter of its team.",
    )
    @action(
        detail=True,
        methods=["get", "post"],
        filterset_class=None,
        pagination_class=None,
        permission_classes=[AllowAny],
    )
    def checkpoints(self, request: Request, pk: str) -> Response:
        obj = self._checkpoint_object(request, pk)
        if request.method == "GET":
            rows = Checkpoint.objects.filter(owner=obj).select_related("workload")
            return Response(s.CheckpointSerializer(rows, many=True).data)
        body = s.CheckpointSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            checkpoint = checkpoints.report(
                obj, body.validated_data["step"], now(), body.validated_data.get("path", "")
            )
        except checkpoints.CheckpointRefused as error:
            raise Conflict(str(error)) from None
        return Response(s.CheckpointSerializer(checkpoint).data, status=status.HTTP_201_CREATED)

    def _checkpoint_object(self, request: Request, pk: str) -> KubeObject:
        subject = _checkpoint_token_subject(request)
        if subject is not None:
            namespace, _, signed_pk = subject.rpartition("/")
            if signed_pk != str(pk):
                raise NotFound()
            found = KubeObject.objects.select_related("cluster")
            obj = found.filter(pk=int(signed_pk), namespace=namespace).first()
            if obj is None:  # deleted since
                raise NotFound()
            return obj
        if not request.user.is_authenticated:
            raise NotAuthenticated()
        obj = self.get_object()
        if request.method == "POST":
            require_write(request, obj.namespace)
        return obj

    @extend_schema(responses=OpenApiResponse(OpenApiTypes.OBJECT))
    @action(detail=True, methods=["get"], filterset_class=None, pagination_class=None)
    def explain(self, request: Request, pk: str) -> Response:
        """Why each of its Kueue workloads is pending, was preempted, or is admitted, and why
        kube-scheduler leaves any of its pods unbound (`unplaced`)."""
        obj = self.get_object()
        at = now()
        rows = obj.workloads.select_related("owner", "cluster").order_by("replica_index")
        explained = explain.explain_all(rows, at)
        unplaced = runtime.unplaced(obj.cluster, list(obj.pods.all()))
        report = {"object": obj.key, "workloads": explained, "unplaced": unplaced}
        return Response(redact(report, request_scope(request)))


class WhatIfViewSet(viewsets.ViewSet):
    """Would these manifests be admitted now? Nothing is stored."""

    def get_parsers(self) -> list[Any]:
        return [parser() for parser in MANIFEST_PARSERS]

    @extend_schema(
        request=MANIFEST_BODY,
        parameters=[CLUSTER_PARAM, NAMESPACE_PARAM],
        responses=OpenApiResponse(OpenApiTypes.OBJECT),
    )
    def create(self, request: Request) -> Response:
        text = manifest_text(request)
        cluster = cluster_for_manifests(request, text)
        result = whatif.whatif(
            cluster,
            text,
            "request",
            now(),
            namespace=request.query_params.get("namespace") or None,
            authorize=submission_check(request_scope(request)),
        )
        return Response(redact(result, request_scope(request)))
