"""Admin forms: clusters, node pools (from the machine catalog), Kueue objects, teams.

Kueue objects are built as manifests and applied through the same service as `kubectl apply`,
so the form and the API validate alike; a ManifestError's field path is shown next to the
form field that produced it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django import forms
from django.core.validators import RegexValidator

from clusters import catalog, credentials
from clusters.models import Cluster, NodePool
from clusters.providers.base import ExistingCluster
from clusters.services import CREDENTIAL_FIELDS, LOCATION, PROJECT_ID, settings_problems
from teams.models import Membership
from web.forms.workloads import choice_field
from web.forms.yaml_lines import with_line
from workloads.manifests import ManifestError
from workloads.models import ClusterQueue, Cohort, ResourceFlavor

KUEUE = "kueue.x-k8s.io/v1beta2"
NAME = RegexValidator(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "lower-case letters, digits and -")
CATALOG_FIELDS = {
    "machineType": "machine_type",
    "tpuTopology": "tpu_topology",
    "nodes": "node_count",
}
POLICIES = [(p, p) for p in ("Never", "LowerPriority", "LowerOrNewerEqualPriority", "Any")]
# The form's one flavor: its i-th resource (and covered resource) is the i-th filled quota.
QUOTA_PATH = re.compile(
    r"spec\.resourceGroups\[0\]\.(?:flavors\[0\]\.resources|coveredResources)\[(\d+)\]"
)


def _machine_label(machine: catalog.MachineType) -> str:
    cpu = f"{machine.cpu_milli // 1000} vCPU, {machine.memory_bytes // catalog.GiB} GiB"
    if machine.accelerator is None:
        return f"{machine.name} ({cpu})"
    topologies = f"; topologies {', '.join(machine.tpu_topologies)}" if machine.is_tpu else ""
    chips = "GPU" if machine.is_gpu else "TPU chip"
    return (
        f"{machine.name} ({machine.accelerator_count} x {machine.accelerator} {chips}"
        f"{'s' if machine.accelerator_count > 1 else ''}{topologies}; {cpu})"
    )


def machine_choices() -> list[tuple[str, list[tuple[str, str]]]]:
    groups: dict[str, list[tuple[str, str]]] = {"GPU": [], "TPU": [], "CPU only": []}
    for machine in catalog.CATALOG.values():
        group = "GPU" if machine.is_gpu else "TPU" if machine.is_tpu else "CPU only"
        groups[group].append((machine.name, _machine_label(machine)))
    return list(groups.items())


def topology_choices() -> list[tuple[str, str]]:
    seen = sorted(
        {t for m in catalog.CATALOG.values() for t in m.tpu_topologies},
        key=lambda t: [int(p) for p in t.split("x")],
    )
    return [("", "none (GPU and CPU pools)"), *((t, t) for t in seen)]


class CredentialUploads(forms.Form):
    """A gke cluster's own credentials, uploaded: checked and sealed here, as the API does,
    and never shown again."""

    service_account_key = forms.FileField(
        required=False,
        help_text="GKE: this cluster's own service account key (JSON); without one, the "
        "workers' Application Default Credentials",
    )
    kubeconfig = forms.FileField(
        required=False,
        help_text="GKE: a kubeconfig to reach the apiserver instead of GKE's endpoint",
    )

    def clean_service_account_key(self) -> str:
        return self._sealed("service_account_key", credentials.service_account_key)

    def clean_kubeconfig(self) -> str:
        return self._sealed("kubeconfig", credentials.kubeconfig)

    def _sealed(self, field: str, check: Callable[[str], dict[str, Any]]) -> str:
        upload = self.cleaned_data.get(field)
        if not upload:
            return ""
        try:
            return credentials.seal(check(upload.read().decode("utf-8", errors="replace")))
        except credentials.CredentialError as error:
            raise forms.ValidationError(f"{upload.name} {error}") from None


class ClusterForm(CredentialUploads):
    """A simulated cluster, or a GKE one with its settings and, optionally, its own
    credentials (checked and sealed here, as the API does; never shown again)."""

    field_order = [
        "name",
        "provider",
        "location",
        "project",
        "autopilot",
        "release_channel",
        "slice_controller",
    ]

    name = forms.CharField(max_length=40, validators=[NAME])
    provider = forms.ChoiceField(
        choices=Cluster.Provider.choices, initial=Cluster.Provider.SIM, required=False
    )
    location = forms.CharField(max_length=64, initial="us-central1", validators=[LOCATION])
    project = forms.CharField(
        max_length=128, required=False, validators=[PROJECT_ID], help_text="GKE: the project id"
    )
    autopilot = forms.BooleanField(required=False, help_text="GKE: Autopilot, not Standard")
    release_channel = forms.ChoiceField(
        choices=Cluster.ReleaseChannel.choices,
        initial=Cluster.ReleaseChannel.RAPID,
        required=False,
        help_text="GKE: dynamic TPU slicing needs RAPID",
    )
    slice_controller = forms.BooleanField(
        required=False, help_text="GKE: the TPU slice controller add-on (dynamic slicing)"
    )

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if Cluster.objects.filter(name=name).exists():
            raise forms.ValidationError(f"a cluster named {name!r} already exists")
        return name

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        # Omitted (a script posting the form): what the form shows selected.
        data["provider"] = data.get("provider") or Cluster.Provider.SIM
        data["release_channel"] = data.get("release_channel") or Cluster.ReleaseChannel.RAPID
        given = [field for field in CREDENTIAL_FIELDS if data.get(field)]
        problems = settings_problems(data["provider"], data.get("project", ""), given)
        for field, problem in problems.items():
            self.add_error(field, problem)
        return data


class ImportClusterForm(CredentialUploads):
    """An existing GKE cluster: first its project and location (and credentials) to list
    them, then the one to import. Credentials are sealed as on the New cluster form; the view
    keeps them in the session between the two steps, never in the page."""

    project = forms.CharField(
        max_length=128, validators=[PROJECT_ID], help_text="the Google Cloud project id"
    )
    location = forms.CharField(
        max_length=64,
        initial="us-central1",
        validators=[LOCATION],
        help_text="a region or zone, as GKE names it",
    )
    name = forms.CharField(
        max_length=40,
        required=False,
        label="Cluster",
        widget=forms.RadioSelect,
        help_text="List the clusters first, then pick the one to import",
    )
    field_order = ["project", "location"]

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if name and Cluster.objects.filter(name=name).exists():
            raise forms.ValidationError(f"a cluster named {name!r} already exists")
        return name

    offered = False
    """The clusters are listed: the next submit imports the one picked."""

    def offer(self, listed: list[ExistingCluster]) -> None:
        """Show the listed clusters to pick from."""
        self.offered = True
        choice = self.fields["name"]
        choice.widget = forms.RadioSelect(choices=[(c.name, _listed_label(c)) for c in listed])
        choice.help_text = (
            f"{len(listed)} clusters in {self.cleaned_data['project']}, "
            f"{self.cleaned_data['location']}; Accelplane records the one you pick and its "
            "node pools, and creates nothing in GKE"
        )


def _listed_label(cluster: ExistingCluster) -> str:
    pools = ", ".join(
        f"{p.name} ({p.node_count} × {p.machine_type}"
        + (f", {p.accelerator_count} × {p.accelerator_type}" if p.accelerator_count else "")
        + (f", {p.tpu_topology}" if p.tpu_topology else "")
        + ")"
        for p in cluster.node_pools
    )
    return f"{cluster.name}: {cluster.status}, {cluster.version}; {pools or 'no node pools'}"


class NodePoolForm(forms.Form):
    name = forms.CharField(max_length=40, validators=[NAME])
    machine_type = forms.ChoiceField(choices=machine_choices)
    node_count = forms.IntegerField(min_value=1, max_value=catalog.MAX_NODES, initial=1)
    tpu_topology = forms.ChoiceField(choices=topology_choices, required=False, label="TPU topology")
    # GKE placement (a simulated cluster ignores them).
    zone = forms.CharField(
        max_length=64, required=False, help_text="GKE: blank for the cluster's first zone"
    )
    reservation = forms.CharField(
        max_length=255,
        required=False,
        help_text="GKE: the only reservation to use: "
        "projects/P/reservations/R[/reservationBlocks/B]",
    )
    workload_policy = forms.CharField(
        max_length=64,
        required=False,
        help_text="GKE: the Compute workload policy placing a super-slicing TPU pool",
    )

    def __init__(self, cluster: Cluster, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cluster = cluster

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if NodePool.objects.filter(cluster=self.cluster, name=name).exists():
            raise forms.ValidationError(f"cluster {self.cluster.name} already has a pool {name!r}")
        return name

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if {"machine_type", "node_count"} <= data.keys():
            try:
                catalog.validate_pool(
                    data["machine_type"], data["node_count"], data.get("tpu_topology") or None
                )
            except catalog.CatalogError as error:
                self.add_error(CATALOG_FIELDS.get(error.field), str(error))
        return data


class NodePoolActionForm(forms.Form):
    """The cluster page's buttons on a pool: resize to `node_count`, or delete (confirmed)."""

    action = forms.ChoiceField(choices=[("resize", "Resize"), ("delete", "Delete")])
    node_count = forms.IntegerField(min_value=1, max_value=catalog.MAX_NODES, required=False)
    confirm = forms.BooleanField(required=False)
    delete_in_gke = forms.BooleanField(
        required=False, help_text="an imported pool: delete it in GKE too, not only forget it"
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("action") == "resize" and data.get("node_count") is None:
            self.add_error("node_count", "how many nodes?")
        if data.get("action") == "delete" and not data.get("confirm"):
            self.add_error("confirm", "tick the box to confirm the deletion")
        return data


class KueueForm(forms.Form):
    """A form that is one Kueue (or scheduling.k8s.io) object: `manifest()` builds it and
    `FIELD_PATHS` maps the manifest's field paths back to the form's fields."""

    KIND = ""
    FIELD_PATHS: tuple[tuple[str, str], ...] = (("metadata.name", "name"),)
    IDENTITY: tuple[str, ...] = ("name",)
    """The fields that say which object it is: fixed when an object is edited."""
    name = forms.CharField(max_length=63, validators=[NAME])

    def __init__(self, cluster: Cluster, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cluster = cluster

    def manifest(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def initial_from(cls, manifest: dict[str, Any]) -> dict[str, Any]:
        """The fields of a stored object, from its rendered manifest (`services.rendered`)."""
        return {"name": manifest["metadata"]["name"]}

    def field_for(self, path: str) -> str | None:
        """The form field that produced the manifest's field at `path` (None: the form)."""
        return next((f for prefix, f in self.FIELD_PATHS if path.startswith(prefix)), None)

    def add_manifest_error(self, error: ManifestError) -> None:
        field = self.field_for(error.path or "")
        # Under its field the manifest path means nothing to the user; above the form it
        # is all that says where the problem is.
        self.add_error(field, error.message if field else str(error))


class KueueYamlForm(KueueForm):
    """Any Kueue object (or several), as YAML."""

    name = None  # type: ignore[assignment]
    manifest_text = forms.CharField(
        label="Manifest",
        widget=forms.Textarea(attrs={"rows": 16, "spellcheck": "false", "class": "code"}),
        help_text="ResourceFlavor, Cohort, ClusterQueue, LocalQueue, (Workload)PriorityClass, "
        "Topology, AdmissionCheck or Kueue Configuration documents",
    )

    def manifest(self) -> dict[str, Any]:
        raise AssertionError("applied as text")

    def add_manifest_error(self, error: ManifestError) -> None:
        self.add_error("manifest_text", with_line(self.cleaned_data["manifest_text"], error))


def _labels(text: str) -> dict[str, str]:
    labels = {}
    for line in text.splitlines():
        if line.strip():
            key, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"{line.strip()!r} is not key=value")
            labels[key.strip()] = value.strip()
    return labels


class ResourceFlavorForm(KueueForm):
    KIND = "ResourceFlavor"
    FIELD_PATHS = (("metadata.name", "name"), ("spec.nodeLabels", "node_labels"))
    node_labels = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One key=value per line, e.g. cloud.google.com/gke-accelerator=nvidia-l4",
    )

    def clean_node_labels(self) -> dict[str, str]:
        return _labels(self.cleaned_data["node_labels"])

    @classmethod
    def initial_from(cls, manifest: dict[str, Any]) -> dict[str, Any]:
        labels = manifest["spec"].get("nodeLabels") or {}
        text = "\n".join(f"{key}={value}" for key, value in labels.items())
        return {**super().initial_from(manifest), "node_labels": text}

    def manifest(self) -> dict[str, Any]:
        spec = (
            {"nodeLabels": self.cleaned_data["node_labels"]}
            if self.cleaned_data["node_labels"]
            else {}
        )
        return {
            "apiVersion": KUEUE,
            "kind": self.KIND,
            "metadata": {"name": self.cleaned_data["name"]},
            "spec": spec,
        }


class CohortForm(KueueForm):
    KIND = "Cohort"
    FIELD_PATHS = (("metadata.name", "name"), ("spec.parentName", "parent"))
    parent = forms.CharField(max_length=63, required=False, help_text="A parent cohort, if any")

    @classmethod
    def initial_from(cls, manifest: dict[str, Any]) -> dict[str, Any]:
        parent = manifest["spec"].get("parentName", "")
        return {**super().initial_from(manifest), "parent": parent}

    def manifest(self) -> dict[str, Any]:
        parent = self.cleaned_data["parent"]
        return {
            "apiVersion": KUEUE,
            "kind": self.KIND,
            "metadata": {"name": self.cleaned_data["name"]},
            "spec": {"parentName": parent} if parent else {},
        }


class ClusterQueueForm(KueueForm):
    KIND = "ClusterQueue"
    FIELD_PATHS = (
        ("metadata.name", "name"),
        ("spec.cohort", "cohort"),
        ("spec.resourceGroups", "flavor"),
        ("spec.preemption", "within_cluster_queue"),
    )
    RESOURCES = (
        ("cpu", "cpu"),
        ("memory", "memory"),
        ("gpus", catalog.GPU_RESOURCE),
        ("tpus", catalog.TPU_RESOURCE),
    )
    cohort = forms.ChoiceField(required=False)
    flavor = forms.ChoiceField(label="ResourceFlavor")
    cpu = forms.CharField(required=False, help_text="Nominal quota, e.g. 72")
    memory = forms.CharField(required=False, help_text="Nominal quota, e.g. 288Gi")
    gpus = forms.CharField(required=False, label="nvidia.com/gpu")
    tpus = forms.CharField(required=False, label="google.com/tpu")
    within_cluster_queue = forms.ChoiceField(choices=POLICIES, initial="LowerPriority")
    reclaim_within_cohort = forms.ChoiceField(choices=POLICIES, initial="Never")

    def __init__(self, cluster: Cluster, *args: Any, **kwargs: Any) -> None:
        super().__init__(cluster, *args, **kwargs)
        cohorts = Cohort.objects.filter(cluster=cluster).values_list("name", flat=True)
        choice_field(self, "cohort").choices = [("", "none"), *((c, c) for c in cohorts)]
        flavors = ResourceFlavor.objects.filter(cluster=cluster).values_list("name", flat=True)
        choice_field(self, "flavor").choices = [(f, f) for f in flavors]

    @classmethod
    def initial_from(cls, manifest: dict[str, Any]) -> dict[str, Any]:
        """The first flavor's quotas: a queue with more is edited as YAML (the form would
        drop the rest, and the page checks that it would not)."""
        spec = manifest["spec"]
        groups = spec.get("resourceGroups") or [{"flavors": [{"name": "", "resources": []}]}]
        flavor = groups[0]["flavors"][0]
        quotas = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
        preemption = spec.get("preemption") or {}
        return {
            **super().initial_from(manifest),
            "cohort": spec.get("cohortName", ""),
            "flavor": flavor["name"],
            **{field: quotas.get(resource, "") for field, resource in cls.RESOURCES},
            "within_cluster_queue": preemption.get("withinClusterQueue", "Never"),
            "reclaim_within_cohort": preemption.get("reclaimWithinCohort", "Never"),
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not any(data.get(field) for field, _ in self.RESOURCES):
            self.add_error("cpu", "give a nominal quota for at least one resource")
        return data

    def _quotas(self) -> list[tuple[str, str, str]]:
        """(form field, resource, nominal quota) of the filled quotas, in manifest order."""
        data = self.cleaned_data
        return [(f, r, data[f]) for f, r in self.RESOURCES if data.get(f)]

    def field_for(self, path: str) -> str | None:
        match = QUOTA_PATH.match(path)
        quotas = self._quotas()
        if match and int(match[1]) < len(quotas):
            return quotas[int(match[1])][0]
        return super().field_for(path)

    def manifest(self) -> dict[str, Any]:
        data = self.cleaned_data
        quotas = [(r, q) for _, r, q in self._quotas()]
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "preemption": {
                "withinClusterQueue": data["within_cluster_queue"],
                "reclaimWithinCohort": data["reclaim_within_cohort"],
            },
            "resourceGroups": [
                {
                    "coveredResources": [r for r, _ in quotas],
                    "flavors": [
                        {
                            "name": data["flavor"],
                            "resources": [{"name": r, "nominalQuota": q} for r, q in quotas],
                        }
                    ],
                }
            ],
        }
        if data["cohort"]:
            spec["cohortName"] = data["cohort"]
        return {
            "apiVersion": KUEUE,
            "kind": self.KIND,
            "metadata": {"name": data["name"]},
            "spec": spec,
        }


class LocalQueueForm(KueueForm):
    KIND = "LocalQueue"
    FIELD_PATHS = (
        ("metadata.namespace", "namespace"),
        ("metadata.name", "name"),
        ("spec.clusterQueue", "cluster_queue"),
    )
    IDENTITY = ("name", "namespace")
    namespace = forms.CharField(max_length=63, validators=[NAME])
    cluster_queue = forms.ChoiceField(label="ClusterQueue")

    def __init__(self, cluster: Cluster, *args: Any, **kwargs: Any) -> None:
        super().__init__(cluster, *args, **kwargs)
        queues = ClusterQueue.objects.filter(cluster=cluster).values_list("name", flat=True)
        choice_field(self, "cluster_queue").choices = [(q, q) for q in queues]

    @classmethod
    def initial_from(cls, manifest: dict[str, Any]) -> dict[str, Any]:
        return {
            **super().initial_from(manifest),
            "namespace": manifest["metadata"]["namespace"],
            "cluster_queue": manifest["spec"]["clusterQueue"],
        }

    def manifest(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "apiVersion": KUEUE,
            "kind": self.KIND,
            "metadata": {"name": data["name"], "namespace": data["namespace"]},
            "spec": {"clusterQueue": data["cluster_queue"]},
        }


class PriorityClassForm(KueueForm):
    KIND = "PriorityClass"
    FIELD_PATHS = (("metadata.name", "name"), ("value", "value"), ("description", "description"))
    IDENTITY = ("name", "workload_priority_class")
    value = forms.IntegerField(min_value=-(2**31), max_value=10**9)
    description = forms.CharField(max_length=200, required=False)
    workload_priority_class = forms.BooleanField(
        required=False, help_text="A Kueue WorkloadPriorityClass instead of a PriorityClass"
    )

    @classmethod
    def initial_from(cls, manifest: dict[str, Any]) -> dict[str, Any]:
        return {
            **super().initial_from(manifest),
            "value": manifest["value"],
            "description": manifest.get("description") or "",
            "workload_priority_class": manifest["kind"] == "WorkloadPriorityClass",
        }

    def manifest(self) -> dict[str, Any]:
        data = self.cleaned_data
        body: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": data["name"]},
            "value": data["value"],
        }
        if data["workload_priority_class"]:
            body.update(apiVersion=KUEUE, kind="WorkloadPriorityClass")
        if data["description"]:
            body["description"] = data["description"]
        return body


KUEUE_FORMS: dict[str, type[KueueForm]] = {
    "resourceflavor": ResourceFlavorForm,
    "cohort": CohortForm,
    "clusterqueue": ClusterQueueForm,
    "localqueue": LocalQueueForm,
    "priorityclass": PriorityClassForm,
}


class TeamForm(forms.Form):
    name = forms.CharField(max_length=63, validators=[NAME])
    namespaces = forms.CharField(
        max_length=500, help_text="Comma-separated; each belongs to this team only"
    )
    members = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One per line: username role (viewer or submitter)",
    )

    def clean_namespaces(self) -> list[str]:
        names = [n.strip() for n in self.cleaned_data["namespaces"].split(",") if n.strip()]
        for name in names:
            NAME(name)
        if not names:
            raise forms.ValidationError("name at least one namespace")
        return names

    def clean_members(self) -> list[tuple[str, str]]:
        members = []
        roles = Membership.Role.values
        for line in self.cleaned_data["members"].splitlines():
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2 or parts[1] not in roles:
                raise forms.ValidationError(
                    f"{line.strip()!r}: write a username and a role ({' or '.join(roles)})"
                )
            members.append((parts[0], parts[1]))
        return members
