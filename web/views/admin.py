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
from clusters.services import CREDENTIAL_FIELDS
from teams import services as team_services
from teams.models import Team
from web.forms.platform import (
    KUEUE_FORMS,
    ClusterForm,
    ImportClusterForm,
    KueueYamlForm,
    NodePoolActionForm,
    NodePoolForm,
    TeamForm,
)
from web.views.common import chosen_cluster, cluster_named, page, signed_in, staff_required
from web.views.kueue import objects_by_cluster
from workloads import services
from workloads.manifests import Document, ManifestError
from workloads.models import QUEUE_MODELS


@staff_required
def platform(request: HttpRequest) -> HttpResponse:
    """What admins manage, with a link to each form."""
    clusters = list(Cluster.objects.prefetch_related("node_pools"))
    objects = objects_by_cluster(clusters)
    context = {
        "clusters": clusters,
        "kueue": [{"cluster": c, "objects": objects[c.pk]} for c in clusters],
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


# The sealed credentials of an import between its two steps (list, then pick), server-side.
IMPORT_SESSION_KEY = "cluster_import"


@staff_required
def import_cluster(request: HttpRequest) -> HttpResponse:
    """List the GKE clusters of a project and location, then record the one picked and its
    node pools as GKE reports them (nothing is created in GKE)."""
    form = ImportClusterForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        # Uploaded with the listing; a later step reuses them for the same project and location.
        kept = request.session.get(IMPORT_SESSION_KEY) or {}
        if (kept.get("project"), kept.get("location")) == (data["project"], data["location"]):
            for field in CREDENTIAL_FIELDS:
                data[field] = data[field] or kept.get(field, "")
        try:
            listed = cluster_services.importable_clusters(
                data["project"], data["location"], data["service_account_key"]
            )
        except cluster_services.ImportRefused as refused:
            form.add_error(refused.field, refused.message)
        else:
            form.offer(listed)
            request.session[IMPORT_SESSION_KEY] = {
                key: data[key] for key in ("project", "location", *CREDENTIAL_FIELDS)
            }
            if data["name"]:
                try:
                    cluster = cluster_services.import_cluster(**data, actor=signed_in(request))
                except cluster_services.ImportRefused as refused:
                    form.add_error(refused.field, refused.message)
                else:
                    request.session.pop(IMPORT_SESSION_KEY, None)
                    return redirect("web:cluster", name=cluster.name)
    submit = "Import" if form.offered else "List clusters"
    return _form_page(request, form, "Import a GKE cluster", submit=submit)


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
            if cluster_services.forgets(row, form.cleaned_data["delete_in_gke"]):
                cluster_services.forget_node_pool(row, actor=actor)
            else:
                cluster_services.delete_node_pool(row, actor=actor)
        else:
            cluster_services.resize_node_pool(row, form.cleaned_data["node_count"], actor=actor)
    except (cluster_services.Busy, catalog.CatalogError) as error:
        messages.error(request, str(error))
    return redirect("web:cluster", name=cluster.name)


@staff_required
@require_POST
def delete_cluster(request: HttpRequest, name: str) -> HttpResponse:
    """Delete a cluster (confirmed) at its provider; a worker does it, then it is gone. An
    imported one is only forgotten unless `delete_in_gke` is ticked too."""
    cluster = cluster_named(name)
    if not request.POST.get("confirm"):
        messages.error(request, "tick the box to confirm the deletion")
        return redirect("web:cluster", name=cluster.name)
    actor = signed_in(request)
    try:
        if cluster_services.forgets(cluster, bool(request.POST.get("delete_in_gke"))):
            cluster_services.forget_cluster(cluster, actor=actor)
            messages.info(request, f"cluster {cluster.name} is forgotten; it is still in GKE")
        else:
            cluster_services.delete_cluster(cluster, actor=actor)
            messages.info(request, f"cluster {cluster.name} is being deleted")
    except cluster_services.Busy as error:
        messages.error(request, str(error))
        return redirect("web:cluster", name=cluster.name)
    return redirect("web:platform")


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
