"""What the API shows of each object; inputs validated with field paths."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from django.contrib.auth.models import User
from django.db.models import Model, Prefetch
from django.utils import timezone
from rest_framework import serializers

from clusters import catalog, credentials
from clusters.models import Cluster, Node, NodePool
from clusters.services import (
    CREDENTIAL_FIELDS,
    LOCATION,
    PROJECT_ID,
    credentials_held,
    settings_problems,
)
from events.models import Event
from events.services import serialize as serialize_event
from teams.models import ApiToken, Membership, Team
from teams.services import audited_team
from workloads.kube import connection
from workloads.models import Checkpoint, KubeObject, Workload
from workloads.status import object_phase

_Model = TypeVar("_Model", bound=Model)


# A ModelSerializer that renders every object with one set of fields per class, built and bound
# once, rather than with fields built, copied and bound for each serializer made: a response of
# one object took a quarter of the time to render. Only for read-only serializers whose fields
# and methods depend on the object alone, never on the serializer's context (the request): those
# shared fields see none. (A comment, not a docstring: the OpenAPI schema would show a docstring
# as its subclasses' description.)
class RendersWithSharedFields(serializers.ModelSerializer[_Model]):
    _renderer: ClassVar[serializers.ModelSerializer[Any]]

    def to_representation(self, instance: _Model) -> dict[str, Any]:
        cls = type(self)
        renderer = cls.__dict__.get("_renderer")  # this class's own: a subclass builds anew
        if renderer is None:
            renderer = cls()
            renderer.fields  # noqa: B018 (bound before any thread sees it: read-only after)
            cls._renderer = renderer
        rendered: dict[str, Any] = serializers.ModelSerializer.to_representation(renderer, instance)
        return rendered


class KueueWorkloadSerializer(RendersWithSharedFields[Workload]):
    conditions = serializers.ListField(child=serializers.DictField(), read_only=True)
    flavors = serializers.SerializerMethodField()
    admitted_pods = serializers.SerializerMethodField()

    class Meta:
        model = Workload
        fields = [
            "name",
            "namespace",
            "replica_index",
            "phase",
            "queue_name",
            "cluster_queue_name",
            "priority",
            "priority_class_name",
            "pending_reason",
            "pending_message",
            "flavors",
            "admitted_pods",
            "queued_at",
            "quota_reserved_at",
            "admitted_at",
            "finished_at",
            "admissions",
            "preemptions",
            "preemption_reason",
            "resumed_from_step",
            "steps_lost",
            "conditions",
        ]
        read_only_fields = fields

    def get_flavors(self, row: Workload) -> dict[str, dict[str, str]]:
        """PodSet -> resource -> flavor, while it holds quota."""
        return {a["name"]: a["flavors"] for a in row.assignments}

    def get_admitted_pods(self, row: Workload) -> dict[str, int]:
        """PodSet -> pods admitted, while it holds quota: fewer than its spec asks when it was
        partially admitted (kueue.x-k8s.io/job-min-parallelism)."""
        return {a["name"]: a["count"] for a in row.assignments}


# Where a KubeObject serialized by WorkloadObjectSerializer holds its Kueue workloads: its
# queryset prefetches them there (`WITH_WORKLOADS`), or an object just created is given those
# it was created with (api/workloads.py).
WORKLOADS_ATTR = "kueue_workloads"
WITH_WORKLOADS = Prefetch("workloads", to_attr=WORKLOADS_ATTR)


def workloads_of(obj: KubeObject) -> list[Workload]:
    rows: list[Workload] = getattr(obj, WORKLOADS_ATTR)
    return rows


class WorkloadObjectSerializer(RendersWithSharedFields[KubeObject]):
    """A submitted object (Job, Deployment, JobSet, LeaderWorkerSet) and its Kueue workloads
    (`WORKLOADS_ATTR`)."""

    cluster = serializers.CharField(source="cluster.name", read_only=True)
    api_version = serializers.CharField(read_only=True)
    phase = serializers.SerializerMethodField()
    queue = serializers.SerializerMethodField()
    workloads = KueueWorkloadSerializer(many=True, read_only=True, source=WORKLOADS_ATTR)

    class Meta:
        model = KubeObject
        fields = [
            "id",
            "cluster",
            "api_version",
            "kind",
            "namespace",
            "name",
            "generation",
            "phase",
            "queue",
            "preemptions",
            "created_at",
            "updated_at",
            "workloads",
            "manifest",
            "managed_elsewhere",
        ]
        read_only_fields = fields

    def get_phase(self, obj: KubeObject) -> str:
        rows = workloads_of(obj)
        return object_phase(obj, rows) if rows else "Unmanaged"

    def get_queue(self, obj: KubeObject) -> str:
        """Its LocalQueue; empty for objects Kueue does not manage (no queue-name label)."""
        rows = workloads_of(obj)
        return rows[0].queue_name if rows else ""


class AppliedSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    action = serializers.ChoiceField(choices=["created", "configured", "unchanged"])


class ApplyResultSerializer(serializers.Serializer[Any]):
    applied = AppliedSerializer(many=True)
    objects = WorkloadObjectSerializer(many=True)


class ScaleSerializer(serializers.Serializer[Any]):
    # The upper bound is the setting ACCELPLANE_MAX_REPLICAS, which services.scale applies.
    replicas = serializers.IntegerField(min_value=0)


class CheckpointSerializer(serializers.ModelSerializer[Checkpoint]):
    workload = serializers.CharField(source="workload.name", read_only=True, default=None)

    class Meta:
        model = Checkpoint
        fields = ["step", "path", "saved_at", "workload"]
        read_only_fields = ["saved_at", "workload"]
        extra_kwargs = {"path": {"required": False, "allow_blank": True}}


class EventSerializer(serializers.BaseSerializer[Event]):
    def to_representation(self, instance: Event) -> dict[str, Any]:
        return serialize_event(instance)


class EventPageSerializer(serializers.Serializer[Any]):
    """Events in sequence order; ask again with `after=next_after` for the ones after."""

    events = serializers.ListField(child=serializers.DictField())
    next_after = serializers.IntegerField()


class NodeSerializer(serializers.ModelSerializer[Node]):
    class Meta:
        model = Node
        fields = ["name", "labels", "taints", "allocatable", "coordinates", "ready"]
        read_only_fields = fields


# What the server or the cluster sets on a node pool; a client reads these, never writes them.
_NODE_POOL_SERVER_FIELDS = [
    "imported",
    "accelerator_type",
    "accelerator_count",
    "min_node_count",
    "max_node_count",
    "placement_type",
    "status",
    "status_message",
    "created_at",
    "nodes",
]


class NodePoolSerializer(serializers.ModelSerializer[NodePool]):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    tpu_topology = serializers.CharField(required=False, allow_blank=True, max_length=16)
    block = serializers.CharField(required=False, allow_blank=True, max_length=64)
    zone = serializers.CharField(required=False, allow_blank=True, max_length=64)
    reservation = serializers.CharField(required=False, allow_blank=True, max_length=255)
    workload_policy = serializers.CharField(required=False, allow_blank=True, max_length=64)
    node_count = serializers.IntegerField(min_value=1, max_value=1000)
    nodes = serializers.SerializerMethodField()

    class Meta:
        model = NodePool
        fields = [
            "id",
            "cluster",
            "name",
            "machine_type",
            "node_count",
            "tpu_topology",
            "block",
            "zone",
            "reservation",
            "workload_policy",
            *_NODE_POOL_SERVER_FIELDS,
        ]
        read_only_fields = ["id", "cluster", *_NODE_POOL_SERVER_FIELDS]
        # The (cluster, name) constraint is checked by the view, where the cluster is known.
        validators: list[Any] = []

    def get_nodes(self, pool: NodePool) -> int:
        counted: int | None = getattr(pool, "node_total", None)  # annotated by list queries
        return pool.nodes.count() if counted is None else counted


class NodePoolResizeSerializer(serializers.Serializer[Any]):
    node_count = serializers.IntegerField(min_value=1, max_value=catalog.MAX_NODES)


# Cluster fields an import takes from GKE instead of the request.
GKE_SETTINGS = (
    "autopilot",
    "release_channel",
    "version",
    "slice_controller",
    "system_machine_type",
    "system_node_count",
)


class ClusterSerializer(serializers.ModelSerializer[Cluster]):
    node_pools = NodePoolSerializer(many=True, read_only=True)
    service_account_key = serializers.JSONField(
        write_only=True,
        required=False,
        help_text="a gke cluster's own service account key (the JSON file, as an object or a "
        "string); stored encrypted and never shown again. Without one, the workers' "
        "Application Default Credentials.",
    )
    kubeconfig = serializers.CharField(
        write_only=True,
        required=False,
        trim_whitespace=False,
        help_text="a gke cluster's kubeconfig (the file's text), used instead of the endpoint "
        "GKE reports; stored encrypted and never shown again. A user authenticating with "
        "gke-gcloud-auth-plugin gets a Google token instead (for GKE's reported endpoint only); "
        "other exec plugins are refused. The server must be https, not loopback, link-local or a "
        "metadata server; proxy-url, insecure-skip-tls-verify and tls-server-name are refused.",
    )
    credentials = serializers.SerializerMethodField(
        help_text="which uploaded credentials the cluster holds (never their contents)"
    )

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "provider",
            "project",
            "location",
            *GKE_SETTINGS,
            "imported",
            "status",
            "status_message",
            "created_at",
            "node_pools",
            "credentials",
            "service_account_key",
            "kubeconfig",
        ]
        read_only_fields = [
            "id",
            "imported",
            "status",
            "status_message",
            "created_at",
            "node_pools",
        ]
        # A taken name is a conflict (409), answered by the view.
        extra_kwargs: dict[str, dict[str, Any]] = {
            "name": {"validators": []},
            "project": {"validators": [PROJECT_ID]},
            "location": {"validators": [LOCATION]},
        }

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        # `import` is a Python keyword: no class attribute can declare it.
        fields["import"] = serializers.BooleanField(
            write_only=True,
            required=False,
            default=False,
            help_text="record an existing GKE cluster (`name` in `project` and `location`) "
            "and its node pools as GKE reports them, instead of creating one; gke only. Its "
            "GKE settings come from GKE: giving any is a 400.",
        )
        return fields

    def validate_service_account_key(self, value: Any) -> str:
        """Checked, then sealed: from here on only its ciphertext exists."""
        try:
            return credentials.seal(credentials.service_account_key(value))
        except credentials.CredentialError as error:
            raise serializers.ValidationError(str(error)) from None

    def validate_kubeconfig(self, value: str) -> str:
        try:
            return credentials.seal(credentials.kubeconfig(value))
        except credentials.CredentialError as error:
            raise serializers.ValidationError(str(error)) from None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        given = [field for field in CREDENTIAL_FIELDS if field in attrs]
        if self.instance is None:
            provider = attrs.get("provider", Cluster.Provider.SIM)
            problems = settings_problems(provider, attrs.get("project", ""), given)
        else:
            # After creation only the credentials change: the rest is the cluster itself.
            fixed = sorted(set(self.initial_data) - set(CREDENTIAL_FIELDS))
            message = "is set when the cluster is created; only credentials change afterwards"
            problems = dict.fromkeys(fixed, message)
            problems = problems or settings_problems(
                self.instance.provider, self.instance.project, given
            )
        if not problems and attrs.get("import"):
            problems = _import_problems(attrs, self.initial_data)
        if problems:
            raise serializers.ValidationError({f: [m] for f, m in problems.items()})
        return attrs

    def get_credentials(self, cluster: Cluster) -> dict[str, bool]:
        return credentials_held(cluster)


def _import_problems(attrs: dict[str, Any], given: Any) -> dict[str, str]:
    if attrs.get("provider", Cluster.Provider.SIM) != Cluster.Provider.GKE:
        return {"import": "only a gke cluster is imported (set provider to gke)"}
    message = "comes from GKE for an imported cluster; leave it out"
    return dict.fromkeys([f for f in GKE_SETTINGS if f in given], message)


class ClusterDetailSerializer(ClusterSerializer):
    connection = serializers.SerializerMethodField(
        help_text="a gke cluster's watches of its apiserver: per resource `state` (watching, "
        "reconnecting, stopped), `last_event_at`, `lag_seconds`, `disconnected_at`, `errors` "
        "(the last 10 each); `alive`, `last_event_at` and the last 10 `errors` overall"
    )

    class Meta(ClusterSerializer.Meta):
        fields = [*ClusterSerializer.Meta.fields, "connection"]
        read_only_fields = [*ClusterSerializer.Meta.read_only_fields, "connection"]

    def get_connection(self, cluster: Cluster) -> dict[str, Any]:
        return connection.status(cluster, timezone.now())


class QueueObjectSerializer(serializers.Serializer[Any]):
    """A Kueue object: its name, where it lives, and the manifest Accelplane renders for it."""

    cluster = serializers.CharField()
    name = serializers.CharField()
    namespace = serializers.CharField(allow_blank=True)
    manifest = serializers.DictField()
    managed_elsewhere = serializers.BooleanField(
        help_text="Read from the cluster; Accelplane changes it only once an admin adopts it"
    )


class QueueApplyResultSerializer(serializers.Serializer[Any]):
    applied = AppliedSerializer(many=True)
    objects = QueueObjectSerializer(many=True)


class MemberSerializer(serializers.Serializer[Any]):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class TeamSerializer(serializers.ModelSerializer[Team]):
    namespaces = serializers.ListField(
        child=serializers.RegexField(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"), required=False
    )
    members = MemberSerializer(many=True, required=False)

    class Meta:
        model = Team
        fields = ["id", "name", "namespaces", "members", "created_at"]
        read_only_fields = ["id", "created_at"]

    def to_representation(self, instance: Team) -> dict[str, Any]:
        return audited_team(instance)


class TokenSerializer(serializers.ModelSerializer[ApiToken]):
    token = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "revoked_at", "token"]
        read_only_fields = ["id", "prefix", "created_at", "last_used_at", "revoked_at", "token"]

    def get_token(self, row: ApiToken) -> str | None:
        """The token itself: only in the answer that created it."""
        value: str | None = self.context.get("token")
        return value


class UserSerializer(serializers.ModelSerializer[User]):
    class Meta:
        model = User
        fields = ["username", "is_staff"]
