"""Forms of the workload pages: the table's filters, scale, and submitting manifests."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from clusters.models import Cluster
from teams.models import Team, TeamNamespace
from teams.services import Scope
from workloads.manifests import ManifestError
from workloads.models import LocalQueue
from workloads.status import WORKLOAD_KINDS

OBJECT_PHASES = (
    "Admitted",
    "Admitting",
    "Pending",
    "Suspended",
    "Inadmissible",
    "Finished",
    "Failed",
)


def choice_field(form: forms.Form, name: str) -> forms.ChoiceField:
    field = form.fields[name]
    assert isinstance(field, forms.ChoiceField)
    return field


def _choices(values: Any, everything: str) -> list[tuple[str, str]]:
    return [("", everything), *((v, v) for v in values)]


def _unknown(what: str) -> dict[str, str]:
    return {"invalid_choice": f"{what} %(value)s: there is none you may see"}


class WorkloadFilterForm(forms.Form):
    """The table's filters, from the query string: a value naming nothing is an error."""

    cluster = forms.ChoiceField(required=False, error_messages=_unknown("cluster"))
    team = forms.ChoiceField(required=False, error_messages=_unknown("team"))
    queue = forms.ChoiceField(
        required=False, label="LocalQueue", error_messages=_unknown("LocalQueue")
    )
    phase = forms.ChoiceField(
        required=False,
        choices=_choices(OBJECT_PHASES, "any phase"),
        error_messages={"invalid_choice": f"phase %(value)s: one of {', '.join(OBJECT_PHASES)}"},
    )
    kind = forms.ChoiceField(
        required=False,
        choices=_choices(WORKLOAD_KINDS, "any kind"),
        error_messages={"invalid_choice": f"kind %(value)s: one of {', '.join(WORKLOAD_KINDS)}"},
    )

    def __init__(self, scope: Scope, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        clusters = Cluster.objects.order_by("name").values_list("name", flat=True)
        choice_field(self, "cluster").choices = _choices(clusters, "all clusters")
        teams = Team.objects.all()
        if not scope.everything:
            teams = teams.filter(namespaces__name__in=scope.readable).distinct()
        choice_field(self, "team").choices = _choices(
            teams.values_list("name", flat=True), "all teams"
        )
        queues = scope.filter(LocalQueue.objects.all()).values_list("name", flat=True)
        choice_field(self, "queue").choices = _choices(sorted(set(queues)), "all queues")


class ScaleForm(forms.Form):
    # The upper bound is the setting ACCELPLANE_MAX_REPLICAS, which services.scale applies.
    replicas = forms.IntegerField(min_value=0)


def submittable_namespaces(scope: Scope) -> list[str]:
    """A team's own namespaces; for admins, as for kubectl, also `default` and every namespace
    that has a LocalQueue, whether or not a team owns it."""
    if not scope.everything:
        return sorted(scope.writable)
    owned = TeamNamespace.objects.values_list("name", flat=True)
    queued = LocalQueue.objects.values_list("namespace", flat=True)
    return sorted({"default", *owned, *queued})


class SubmitForm(forms.Form):
    """`kubectl apply` from the browser: paste YAML or upload a file."""

    cluster = forms.ModelChoiceField(queryset=Cluster.objects.all(), to_field_name="name")
    namespace = forms.ChoiceField(help_text="For documents that name none, as kubectl apply -n")
    manifest = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false", "class": "code"}),
        help_text="One or more YAML documents separated by ---",
    )
    upload = forms.FileField(required=False, label="or upload a YAML file")

    def __init__(self, scope: Scope, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choice_field(self, "namespace").choices = [(n, n) for n in submittable_namespaces(scope)]
        if Cluster.objects.count() == 1:
            self.fields["cluster"].initial = Cluster.objects.get()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        upload = data.get("upload")
        if upload is not None:
            if upload.size > settings.ACCELPLANE_MAX_MANIFEST_BYTES:
                self.add_error("upload", "the file is larger than the manifest limit")
                return data
            data["manifest"] = upload.read().decode("utf-8", errors="replace")
        if not (data.get("manifest") or "").strip():
            self.add_error("manifest", "paste a manifest or upload a file")
        return data

    def add_manifest_error(self, error: ManifestError) -> None:
        detail = str(error)
        if error.value is not None and error.path:
            detail += f" (value: {error.value!r})"
        self.add_error("manifest", detail)
