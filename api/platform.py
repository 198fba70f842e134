"""What platform admins manage: clusters, node pools, Kueue objects, teams; and API tokens."""

from __future__ import annotations

from typing import Any, ClassVar

import yaml
from django.contrib.auth.models import User
from django.db.models import Count, Prefetch, QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import serializers as s
from api.common import Conflict, IsAdminOrReadOnly, cluster_from, now, signed_in
from api.parsers import MANIFEST_PARSERS, manifest_text
from api.workloads import CLUSTER_PARAM, MANIFEST_BODY
from clusters import services as cluster_services
from clusters.models import Cluster, NodePool
from teams import services as team_services
from teams.models import ApiToken, Team
from teams.services import request_scope
from workloads import services
from workloads.manifests import Document
from workloads.manifests.fields import Fields
from workloads.models import QUEUE_MODELS, ClusterQueue, QueueObject
from workloads.status import cluster_queue_usage

YAML_STREAM = {"type": "array", "items": {"type": "object"}}
# Dependencies first, so that the export applies cleanly in order.
EXPORT_ORDER = (
    "Configuration",
    "Topology",
    "ResourceFlavor",
    "AdmissionCheck",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "WorkloadPriorityClass",
    "PriorityClass",
)


DELETE_IN_GKE = OpenApiParameter(
    "delete_in_gke",
    bool,
    description="an imported cluster or pool: delete it in GKE too (default false: only "
    "forget it); ignored for what Accelplane created, which is always deleted at its provider",
)


def _delete_in_gke(request: Request) -> bool:
    value = request.query_params.get("delete_in_gke", "false")
    if value not in ("true", "false"):
        raise ValidationError({"delete_in_gke": [f"{value[:20]!r} is not true or false"]})
    return value == "true"


def _import(data: dict[str, Any], actor: User) -> Cluster:
    """Import an existing GKE cluster; a refusal is a 400 naming its field."""
    try:
        return cluster_services.import_cluster(
            name=data["name"],
            project=data.get("project", ""),
            location=data.get("location", "us-central1"),
            service_account_key=data.get("service_account_key", ""),
            kubeconfig=data.get("kubeconfig", ""),
            actor=actor,
        )
    except cluster_services.ImportRefused as refused:
        raise ValidationError({refused.field: [refused.message]}) from None


class ClusterViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet[Cluster],
):
    queryset = Cluster.objects.prefetch_related(
        Prefetch("node_pools", queryset=NodePool.objects.annotate(node_total=Count("nodes")))
    ).order_by("id")
    serializer_class = s.ClusterSerializer
    permission_classes = [IsAdminOrReadOnly]
    # PATCH replaces a cluster's credentials (or resizes a pool); there is nothing to PUT.
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_serializer_class(self) -> type[s.ClusterSerializer]:
        return s.ClusterDetailSerializer if self.action == "retrieve" else s.ClusterSerializer

    def perform_create(self, serializer: s.ClusterSerializer) -> None:  # type: ignore[override]
        data = dict(serializer.validated_data)
        if Cluster.objects.filter(name=data["name"]).exists():
            raise Conflict(f"a cluster named {data['name']!r} already exists")
        if data.pop("import"):
            serializer.instance = _import(data, signed_in(self.request))
            return
        serializer.instance = cluster_services.create_cluster(
            name=data.pop("name"),
            provider=data.pop("provider", Cluster.Provider.SIM),
            project=data.pop("project", ""),
            location=data.pop("location", "us-central1"),
            actor=signed_in(self.request),
            **data,  # the GKE settings
        )

    @extend_schema(parameters=[DELETE_IN_GKE], responses={202: s.ClusterSerializer, 204: None})
    def destroy(self, request: Request, pk: str) -> Response:
        """Delete the cluster at its provider (a worker does it; the cluster is DELETING until
        then, watch `cluster.*` events); then Accelplane forgets it. An imported cluster is
        only forgotten (204), and stays in GKE, unless `?delete_in_gke=true`. 409 while it is
        being created or already deleted."""
        cluster = self.get_object()
        actor = signed_in(request)
        try:
            if cluster_services.forgets(cluster, _delete_in_gke(request)):
                cluster_services.forget_cluster(cluster, actor=actor)
                return Response(status=status.HTTP_204_NO_CONTENT)
            cluster = cluster_services.delete_cluster(cluster, actor=actor)
        except cluster_services.Busy as busy:
            raise Conflict(str(busy)) from None
        return Response(s.ClusterSerializer(cluster).data, status=status.HTTP_202_ACCEPTED)

    def perform_update(self, serializer: s.ClusterSerializer) -> None:  # type: ignore[override]
        assert serializer.instance is not None
        serializer.instance = cluster_services.replace_credentials(
            serializer.instance, serializer.validated_data, actor=signed_in(self.request)
        )

    @extend_schema(methods=["GET"], responses=s.NodePoolSerializer(many=True))
    @extend_schema(
        methods=["POST"], request=s.NodePoolSerializer, responses={201: s.NodePoolSerializer}
    )
    @action(detail=True, methods=["get", "post"], url_path="nodepools", pagination_class=None)
    def node_pools(self, request: Request, pk: str) -> Response:
        """A cluster's node pools; POST creates one (provisioned by a worker, watch its events)."""
        cluster = self.get_object()
        if request.method == "GET":
            pools = cluster.node_pools.annotate(node_total=Count("nodes")).order_by("name")
            return Response(s.NodePoolSerializer(pools, many=True).data)
        body = s.NodePoolSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if NodePool.objects.filter(cluster=cluster, name=data["name"]).exists():
            return Response(
                {"name": [f"cluster {cluster.name} already has a node pool {data['name']!r}"]},
                status=status.HTTP_409_CONFLICT,
            )
        pool = cluster_services.create_node_pool(cluster, **data, actor=signed_in(request))
        return Response(s.NodePoolSerializer(pool).data, status=status.HTTP_201_CREATED)

    @extend_schema(methods=["PATCH"], request=s.NodePoolResizeSerializer)
    @extend_schema(methods=["DELETE"], parameters=[DELETE_IN_GKE])
    @extend_schema(responses={202: s.NodePoolSerializer, 204: None})
    @action(
        detail=True,
        methods=["patch", "delete"],
        url_path=r"nodepools/(?P<pool>[a-z0-9-]+)",
        pagination_class=None,
    )
    def node_pool(self, request: Request, pk: str, pool: str) -> Response:
        """PATCH `{"node_count": N}` resizes a pool; DELETE deletes it. A worker does it at the
        provider: the pool is RESIZING or DELETING until then (watch `node_pool.*` events).
        DELETE of an imported pool only forgets it (204) unless `?delete_in_gke=true`."""
        cluster = self.get_object()
        row = NodePool.objects.filter(cluster=cluster, name=pool).first()
        if row is None:
            raise NotFound(f"cluster {cluster.name} has no node pool {pool!r}")
        actor = signed_in(request)
        try:
            if request.method == "DELETE" and cluster_services.forgets(
                row, _delete_in_gke(request)
            ):
                cluster_services.forget_node_pool(row, actor=actor)
                return Response(status=status.HTTP_204_NO_CONTENT)
            if request.method == "DELETE":
                row = cluster_services.delete_node_pool(row, actor=actor)
            else:
                body = s.NodePoolResizeSerializer(data=request.data)
                body.is_valid(raise_exception=True)
                count = body.validated_data["node_count"]
                row = cluster_services.resize_node_pool(row, count, actor=actor)
        except cluster_services.Busy as busy:
            raise Conflict(str(busy)) from None
        return Response(s.NodePoolSerializer(row).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        responses={
            (200, "application/yaml"): OpenApiResponse(
                YAML_STREAM, description="A YAML stream: one document per Kueue object"
            )
        }
    )
    @action(detail=True, methods=["get"], url_path="kueue.yaml", pagination_class=None)
    def kueue_yaml(self, request: Request, pk: str) -> HttpResponse:
        """Every Kueue object of the cluster, as YAML to `kubectl apply`; of the namespaced
        ones (LocalQueues), those of the caller's teams."""
        cluster = self.get_object()
        caller = request_scope(request)
        manifests = []
        for kind in EXPORT_ORDER:
            model = QUEUE_MODELS[kind]
            rows = model._default_manager.filter(cluster=cluster)
            if model.NAMESPACED:
                rows = caller.filter(rows).order_by("namespace", "name")
            else:
                rows = rows.order_by("name")
            manifests += [services.rendered(row) for row in rows]
        text = yaml.safe_dump_all(manifests, sort_keys=False)
        return HttpResponse(text, content_type="application/yaml")


class QueueObjectViewSet(viewsets.GenericViewSet[Any]):
    """One Kueue kind: list and read (everyone), apply a manifest and delete (admins)."""

    kind: ClassVar[str] = ""
    permission_classes = [IsAdminOrReadOnly]
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    serializer_class = s.QueueObjectSerializer

    @property
    def model(self) -> type[QueueObject]:
        return QUEUE_MODELS[self.kind]

    def get_queryset(self) -> QuerySet[Any]:
        if getattr(self, "swagger_fake_view", False):
            return self.model._default_manager.none()
        rows = self.model._default_manager.filter(cluster=cluster_from(self.request))
        if self.model.NAMESPACED:
            rows = request_scope(self.request).filter(rows)
        return rows.select_related("cluster").order_by("pk")

    def get_parsers(self) -> list[Any]:
        if self.request is not None and self.request.method == "POST":
            return [parser() for parser in MANIFEST_PARSERS]
        return super().get_parsers()

    def get_object(self) -> Any:
        name = self.kwargs["name"]
        lookup: dict[str, Any] = {"name": name}
        if self.model.NAMESPACED:
            namespace, _, name = name.partition(".")  # namespaces have no dots
            lookup = {"namespace": namespace, "name": name}
        row = self.get_queryset().filter(**lookup).first()
        if row is None:
            raise NotFound()
        return row

    def _show(self, row: Any) -> dict[str, Any]:
        return {
            "cluster": row.cluster.name,
            "name": row.name,
            "namespace": getattr(row, "namespace", ""),
            "manifest": services.rendered(row),
            "managed_elsewhere": row.managed_elsewhere,
        }

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None
        return self.get_paginated_response([self._show(row) for row in page])

    def retrieve(self, request: Request, name: str) -> Response:
        return Response(self._show(self.get_object()))

    @extend_schema(
        request=MANIFEST_BODY,
        parameters=[CLUSTER_PARAM],
        responses={201: s.QueueApplyResultSerializer, 200: s.QueueApplyResultSerializer},
    )
    def create(self, request: Request) -> Response:
        """`kubectl apply` of one or more objects of this kind."""

        def only_this_kind(doc: Document) -> None:
            if doc.kind != self.kind:
                raise Fields.of(doc).error(
                    "kind", doc.kind, f"this endpoint takes {self.kind} objects"
                )

        applied = services.apply(
            cluster_from(request),
            manifest_text(request),
            source="request",
            now=now(),
            authorize=only_this_kind,
            actor=signed_in(request),
        )
        created = any(a.action == "created" for a in applied)
        stored = self.model._default_manager.select_related("cluster")
        by_pk = stored.in_bulk([a.pk for a in applied])
        rows = {a.key: by_pk[a.pk] for a in applied}  # an object applied twice is shown once
        body = {
            "applied": [{"key": a.key, "action": a.action} for a in applied],
            "objects": [self._show(row) for row in rows.values()],
        }
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    def destroy(self, request: Request, name: str) -> Response:
        row = self.get_object()
        namespace = getattr(row, "namespace", None)
        try:
            services.delete_queue_object(
                row.cluster, self.kind, row.name, namespace, now(), actor=signed_in(request)
            )
        except services.InUse as error:
            raise Conflict(str(error)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses=s.QueueObjectSerializer)
    @action(detail=True, methods=["post"], pagination_class=None)
    def adopt(self, request: Request, name: str) -> Response:
        """Take over an object read from the cluster (managed elsewhere): Accelplane's applies
        then change it by server-side apply, conflicts with other managers answered 409."""
        row = self.get_object()
        adopted = services.adopt_queue_object(
            row.cluster,
            self.kind,
            row.name,
            getattr(row, "namespace", None),
            now(),
            actor=signed_in(request),
        )
        return Response(self._show(adopted))


def queue_viewset(kind: str) -> type[QueueObjectViewSet]:
    doc = f"{kind} objects of a cluster (`?cluster=NAME` when there are several)."
    if QUEUE_MODELS[kind].NAMESPACED:
        doc += " Addressed as NAMESPACE.NAME."
    return type(f"{kind}ViewSet", (QueueObjectViewSet,), {"kind": kind, "__doc__": doc})


class ClusterQueueViewSet(QueueObjectViewSet):
    """ClusterQueues of a cluster (`?cluster=NAME` when there are several)."""

    kind = "ClusterQueue"

    @extend_schema(responses=OpenApiResponse(OpenApiTypes.OBJECT))
    @action(detail=True, methods=["get"], pagination_class=None)
    def usage(self, request: Request, name: str) -> Response:
        """Per flavor and resource: nominal, used, borrowed, limits and pending demand."""
        row: ClusterQueue = self.get_object()
        return Response(cluster_queue_usage(row.cluster, row))


class TeamViewSet(viewsets.ModelViewSet[Team]):
    """Teams, their namespaces and members. Admins manage them; members see their own."""

    serializer_class = s.TeamSerializer
    permission_classes = [IsAdminOrReadOnly]
    http_method_names = ["get", "post", "patch", "delete"]

    def get_queryset(self) -> QuerySet[Team]:
        if getattr(self, "swagger_fake_view", False):
            return Team.objects.none()
        teams = Team.objects.prefetch_related("namespaces", team_services.prefetch_members())
        teams = teams.order_by("name")
        if self.request.user.is_staff:
            return teams
        return teams.filter(memberships__user=signed_in(self.request))

    def perform_create(self, serializer: s.TeamSerializer) -> None:  # type: ignore[override]
        name = serializer.validated_data["name"]
        serializer.instance = self._ensure(serializer.validated_data, name)

    def perform_update(self, serializer: s.TeamSerializer) -> None:  # type: ignore[override]
        assert serializer.instance is not None
        serializer.instance = self._ensure(serializer.validated_data, serializer.instance.name)

    def perform_destroy(self, instance: Team) -> None:
        team_services.delete_team(instance, actor=signed_in(self.request))

    def _ensure(self, data: dict[str, Any], name: str) -> Team:
        try:
            return team_services.ensure_team(
                name,
                namespaces=list(data.get("namespaces", [])),
                members=[(m["username"], m["role"]) for m in data.get("members", [])],
                actor=signed_in(self.request),
            )
        except team_services.TeamError as error:
            raise Conflict(str(error)) from None


class TokenViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet[ApiToken],
):
    """Your API tokens. The token itself is shown once, in the answer that creates it."""

    serializer_class = s.TokenSerializer
    permission_classes = [IsAuthenticated]

    def get_queryset(self) -> QuerySet[ApiToken]:
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=signed_in(self.request)).order_by("-created_at", "-pk")

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = signed_in(request)
        row, token = team_services.issue_token(
            user, name=body.validated_data.get("name", "api"), actor=user
        )
        data = s.TokenSerializer(row, context={"token": token}).data
        return Response(data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiToken) -> None:
        team_services.revoke(instance, actor=signed_in(self.request))


class Me(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(responses=OpenApiResponse(OpenApiTypes.OBJECT))
    def get(self, request: Request) -> Response:
        caller = request_scope(request)
        return Response(
            {
                "username": request.user.get_username(),
                "is_staff": bool(request.user.is_staff),
                "namespaces": sorted(caller.readable),
                "writable_namespaces": sorted(caller.writable),
            }
        )
