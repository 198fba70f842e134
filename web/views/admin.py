"""Platform admins' forms: clusters, node pools, Kueue objects and teams."""

from __future__ import annotations

from typing import Any

import yaml
from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from clusters import catalog
from clusters import services as cluster_services
from clusters.models import Cluster, NodePool
from teams import services as team_services
from teams.models import Team
from web.forms.platform import (
    KUEUE_FORMS,
    ClusterForm,
    KueueForm,
    NodePoolActionForm,
    NodePoolForm,
    TeamForm,
)
from web.views.common import chosen_cluster, cluster_named, page, signed_in, staff_required
from workloads import services
from workloads.manifests import Document, ManifestError
from workloads.models import QUEUE_MODELS


@staff_required
def platform(request: HttpRequest) -> HttpResponse:
    """What admins manage, with a link to each form."""
    context = {
        "clusters": Cluster.objects.prefetch_related("node_pools"),
        "teams": Team.objects.prefetch_related("namespaces", "memberships__user"),
        # Names, not the form classes: a template would call a class it is handed.
        "kinds": {slug: form.KIND for slug, form in KUEUE_FORMS.items()},
    }
    return page(request, "web/platform.html", {}, context)


def _form_page(request: HttpRequest, form: forms.Form, title: str, **extra: Any) -> HttpResponse:
    status = 400 if form.is_bound and form.errors else 200
    return page(request, "web/form.html", {}, {"form": form, "title": title, **extra}, status)


@staff_required
def new_cluster(request: HttpRequest) -> HttpResponse:
    """Create a cluster; the cluster page then shows the operation until it is RUNNING."""
    form = ClusterForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        cluster = cluster_services.create_cluster(**form.cleaned_data, actor=signed_in(request))
        return redirect("web:cluster", name=cluster.name)
    return _form_page(request, form, "New cluster")


@staff_required
def new_node_pool(request: HttpRequest, name: str) -> HttpResponse:
    """A GPU, TPU or CPU node pool from the machine catalog, provisioned by a worker."""
    cluster = cluster_named(name)
    form = NodePoolForm(cluster, request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            cluster_services.create_node_pool(cluster, **data, actor=signed_in(request))
        except catalog.CatalogError as error:  # the form asked the catalog already
            form.add_error(None, str(error))
        else:
            return redirect("web:cluster", name=cluster.name)
    return _form_page(
        request, form, f"New node pool in {cluster.name}", cluster=cluster, catalog=True
    )


@staff_required
@require_POST
def node_pool_action(request: HttpRequest, name: str, pool: str) -> HttpResponse:
    """Resize (`node_count`) or delete (`confirm` ticked) a node pool from the cluster page;
    a worker does it and the page shows the pool RESIZING or DELETING until then."""
    cluster = cluster_named(name)
    row = get_object_or_404(NodePool, cluster=cluster, name=pool)
    form = NodePoolActionForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, f"node pool {pool}: {' '.join(map(str, errors))}")
        return redirect("web:cluster", name=cluster.name)
    actor = signed_in(request)
    try:
        if form.cleaned_data["action"] == "delete":
            cluster_services.delete_node_pool(row, actor=actor)
        else:
            cluster_services.resize_node_pool(row, form.cleaned_data["node_count"], actor=actor)
    except (cluster_services.Busy, catalog.CatalogError) as error:
        messages.error(request, str(error))
    return redirect("web:cluster", name=cluster.name)


@staff_required
@require_POST
def delete_cluster(request: HttpRequest, name: str) -> HttpResponse:
    """Delete a cluster (confirmed) at its provider; a worker does it, then it is gone."""
    cluster = cluster_named(name)
    if not request.POST.get("confirm"):
        messages.error(request, "tick the box to confirm the deletion")
        return redirect("web:cluster", name=cluster.name)
    try:
        cluster_services.delete_cluster(cluster, actor=signed_in(request))
    except cluster_services.Busy as error:
        messages.error(request, str(error))
        return redirect("web:cluster", name=cluster.name)
    messages.info(request, f"cluster {cluster.name} is being deleted")
    return redirect("web:platform")


class KueueYamlForm(KueueForm):
    """Any Kueue object (or several), as YAML."""

    name = None  # type: ignore[assignment]
    manifest_text = forms.CharField(
        label="Manifest",
        widget=forms.Textarea(attrs={"rows": 16, "spellcheck": "false", "class": "code"}),
        help_text="ResourceFlavor, Cohort, ClusterQueue, LocalQueue, (Workload)PriorityClass, "
        "Topology or AdmissionCheck documents",
    )

    def manifest(self) -> dict[str, Any]:
        raise AssertionError("applied as text")

    def add_manifest_error(self, error: ManifestError) -> None:
        self.add_error("manifest_text", str(error))


def _only_kueue(doc: Document) -> None:
    if doc.kind not in QUEUE_MODELS:
        raise ManifestError(
            "only Kueue and priority objects are managed here; submit workloads on Submit",
            source=doc.source,
            document=doc.index,
            object=doc.key,
            path="kind",
            value=doc.kind,
        )


@staff_required
def new_kueue_object(request: HttpRequest, kind: str) -> HttpResponse:
    """A ResourceFlavor, Cohort, ClusterQueue, LocalQueue or priority class, from fields or
    YAML, applied as `kubectl apply` would."""
    cluster = chosen_cluster(request)
    form_class = KueueYamlForm if kind == "yaml" else KUEUE_FORMS.get(kind)
    if form_class is None or cluster is None:
        raise Http404("no such kind, or no cluster yet")
    form = form_class(cluster, request.POST or None)
    if request.method == "POST" and form.is_valid():
        text = (
            form.cleaned_data["manifest_text"]
            if isinstance(form, KueueYamlForm)
            else yaml.safe_dump(form.manifest(), sort_keys=False)
        )
        try:
            services.apply(
                cluster,
                text,
                source="form",
                now=timezone.now(),
                authorize=_only_kueue,
                actor=signed_in(request),
            )
        except ManifestError as error:
            form.add_manifest_error(error)
        else:
            return redirect(f"/queues/?cluster={cluster.name}")
    title = "Kueue objects as YAML" if kind == "yaml" else f"New {form_class.KIND}"
    return _form_page(request, form, f"{title} in {cluster.name}", cluster=cluster)


@staff_required
def new_team(request: HttpRequest) -> HttpResponse:
    """A team, the namespaces it owns and its members (created if they do not exist)."""
    form = TeamForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            team_services.ensure_team(
                data["name"],
                namespaces=data["namespaces"],
                members=data["members"],
                actor=signed_in(request),
            )
        except team_services.TeamError as error:  # roles are checked by the form
            form.add_error("namespaces", str(error))
        else:
            return redirect("web:platform")
    return _form_page(request, form, "New team")
