"""One Kueue object, for platform admins: its manifest, edited as YAML or with its form, and
deleted unless something still needs it. An object read from the cluster (managed elsewhere)
is only shown until an admin adopts it; its edits and deletion are refused (409) before.

Every change goes through `services.apply` / `services.delete_queue_object`, as the API's
does: validated before anything is written, all or nothing, audited.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from clusters.models import Cluster
from web.forms.platform import KUEUE_FORMS, KueueForm, KueueYamlForm, PriorityClassForm
from web.views.common import cluster_named, page, signed_in, staff_required
from workloads import manifests, services
from workloads.manifests import Document, ManifestError
from workloads.models import QUEUE_MODELS, LocalQueue, QueueObject

KINDS = {kind.lower(): kind for kind in QUEUE_MODELS}
FORMS: dict[str, type[KueueForm]] = {
    **{form.KIND: form for form in KUEUE_FORMS.values()},
    "WorkloadPriorityClass": PriorityClassForm,  # its form makes either class
}


def object_url(row: QueueObject, action: str = "") -> str:
    """The admin page of a stored Kueue object; `action` "edit", "yaml", "delete" or "adopt"."""
    name = "web:kueue-object" + (f"-{action}" if action else "")
    if isinstance(row, LocalQueue):
        args = [row.cluster.name, row.namespace, row.KIND.lower(), row.name]
        return reverse(f"{name}-namespaced", args=args)
    return reverse(name, args=[row.cluster.name, row.KIND.lower(), row.name])


def _stored(name: str, kind: str, obj: str, namespace: str | None) -> QueueObject:
    """The object the URL names: 404 for an unknown kind or object, or a namespace given to a
    cluster-scoped kind (and none to a namespaced one)."""
    model = QUEUE_MODELS.get(KINDS.get(kind, ""))
    if model is None or (namespace is not None) != model.NAMESPACED:
        raise Http404("no such Kueue kind")
    lookup: dict[str, Any] = {"cluster": cluster_named(name), "name": obj}
    if namespace is not None:
        lookup["namespace"] = namespace
    row = model._default_manager.select_related("cluster").filter(**lookup).first()
    if row is None:
        raise Http404(f"no {model.KIND} {obj}")
    return row


def _as_yaml(manifest: dict[str, Any]) -> str:
    return yaml.safe_dump(manifest, sort_keys=False)


def _form_for(row: QueueObject, data: Any = None) -> KueueForm | None:
    """The kind's form filled with the object, with the fields naming it fixed; None when
    there is no form, or when the form cannot show all of it (saving would drop the rest)."""
    form_class = FORMS.get(row.KIND)
    if form_class is None:
        return None
    initial = form_class.initial_from(services.rendered(row))
    if not _shows_everything(form_class, row, initial):
        return None
    form = form_class(row.cluster, data, initial=initial)
    for name in form_class.IDENTITY:
        form.fields[name].disabled = True
    return form


def _shows_everything(
    form_class: type[KueueForm], row: QueueObject, initial: dict[str, Any]
) -> bool:
    """Saving the unchanged form would store the same spec: the form shows every field set."""
    filled = form_class(row.cluster, initial)
    if not filled.is_valid():
        return False
    try:
        (doc,) = manifests.load_documents(_as_yaml(filled.manifest()), source="form")
        return doc.kind == row.KIND and manifests.queue_spec(doc) == row.spec
    except ManifestError:
        return False


def _this_object(row: QueueObject) -> Any:
    """`services.apply`'s `authorize`: the edit may change this object and nothing else."""

    def authorize(doc: Document) -> None:
        same = doc.kind == row.KIND if row.SINGLETON else doc.key == row.key
        if not same:
            raise ManifestError(
                f"this page edits {row.key}; create other objects from the Admin page",
                source=doc.source,
                document=doc.index,
                object=doc.key,
                path="metadata.name" if doc.kind == row.KIND else "kind",
                value=doc.name if doc.kind == row.KIND else doc.kind,
            )

    return authorize


def _apply(request: HttpRequest, row: QueueObject, text: str, form: KueueForm) -> bool:
    """Apply the edited manifest; its problem goes on `form` (False), else a notice (True)."""
    try:
        applied = services.apply(
            row.cluster,
            text,
            source="manifest" if isinstance(form, KueueYamlForm) else "form",
            now=timezone.now(),
            authorize=_this_object(row),
            actor=signed_in(request),
        )
    except ManifestError as error:
        form.add_manifest_error(error)
        return False
    messages.info(request, f"{row.key} {applied[0].action}")
    return True


def _show(
    request: HttpRequest, row: QueueObject, problem: str = "", status: int = 200
) -> HttpResponse:
    context = {
        "row": row,
        "manifest": _as_yaml(services.rendered(row)),
        "editable": _form_for(row) is not None,
        "links": {a: object_url(row, a) for a in ("edit", "yaml", "delete", "adopt")},
        "queue_url": _queue_url(row),
        "problem": problem,
    }
    return page(request, "web/kueue_object.html", {}, context, status)


def _queue_url(row: QueueObject) -> str | None:
    if row.KIND == "ClusterQueue":
        return reverse("web:cluster-queue", args=[row.cluster.name, row.name])
    if isinstance(row, LocalQueue):
        return reverse("web:local-queue", args=[row.cluster.name, row.namespace, row.name])
    return None


@staff_required
def kueue_object(
    request: HttpRequest, name: str, kind: str, obj: str, namespace: str | None = None
) -> HttpResponse:
    """A Kueue object's manifest as stored, with its edit and delete actions."""
    return _show(request, _stored(name, kind, obj, namespace))


def _refused(request: HttpRequest, row: QueueObject) -> HttpResponse | None:
    """The object's page with the reason (409) while it is managed elsewhere, as the service
    would refuse the change; None once it is Accelplane's."""
    try:
        services.refuse_unadopted(row)
    except services.ManagedElsewhere as error:
        return _show(request, row, str(error), 409)
    return None


@staff_required
def edit_yaml(
    request: HttpRequest, name: str, kind: str, obj: str, namespace: str | None = None
) -> HttpResponse:
    """Edit the object's manifest, then apply it as `kubectl apply` would."""
    row = _stored(name, kind, obj, namespace)
    if refused := _refused(request, row):
        return refused
    initial = {"manifest_text": _as_yaml(services.rendered(row))}
    form = KueueYamlForm(row.cluster, request.POST or None, initial=initial)
    return _applied_or_edit_page(
        request, row, form, lambda: form.cleaned_data["manifest_text"], "as YAML"
    )


@staff_required
def edit_form(
    request: HttpRequest, name: str, kind: str, obj: str, namespace: str | None = None
) -> HttpResponse:
    """Edit the object with its kind's form, when the form shows all of it."""
    row = _stored(name, kind, obj, namespace)
    if refused := _refused(request, row):
        return refused
    form = _form_for(row, request.POST or None)
    if form is None:
        messages.error(request, f"{row.key} has fields its form does not show: edit it as YAML")
        return redirect(object_url(row, "yaml"))
    return _applied_or_edit_page(request, row, form, lambda: _as_yaml(form.manifest()), "")


def _applied_or_edit_page(
    request: HttpRequest,
    row: QueueObject,
    form: KueueForm,
    manifest_text: Callable[[], str],
    how: str,
) -> HttpResponse:
    """A valid POST applies `manifest_text()` (read only once the form is valid) and goes to
    the object's page; otherwise, or when the apply is refused, the edit page again."""
    if request.method == "POST" and form.is_valid() and _apply(request, row, manifest_text(), form):
        return redirect(object_url(row))
    status = 400 if form.is_bound and form.errors else 200
    context = {
        "form": form,
        "title": f"Edit {row.KIND} {row.name} {how}".strip(),
        "submit": "Apply",
        "cancel": object_url(row),
    }
    return page(request, "web/form.html", {}, context, status)


@staff_required
@require_POST
def delete(
    request: HttpRequest, name: str, kind: str, obj: str, namespace: str | None = None
) -> HttpResponse:
    """Delete the object (confirmed), unless Kueue's finalizers would keep it: the reason
    (workloads holding quota, queues using a flavor) is shown on its page with a 409."""
    row = _stored(name, kind, obj, namespace)
    if not request.POST.get("confirm"):
        return _show(request, row, "tick the box to confirm the deletion", 400)
    try:
        services.delete_queue_object(
            row.cluster,
            row.KIND,
            row.name,
            getattr(row, "namespace", None),
            timezone.now(),
            actor=signed_in(request),
        )
    except (services.InUse, services.ManagedElsewhere) as error:
        return _show(request, row, f"not deleted: {error}", 409)
    except services.ObjectNotFound:
        raise Http404(f"no {row.KIND} {row.name}") from None
    messages.info(request, f"{row.key} deleted")
    return redirect("web:platform")


@staff_required
@require_POST
def adopt(
    request: HttpRequest, name: str, kind: str, obj: str, namespace: str | None = None
) -> HttpResponse:
    """Take over an object read from the cluster, as POST /api/v1/<kind>/<name>/adopt does:
    Accelplane's applies change it from now on."""
    row = _stored(name, kind, obj, namespace)
    services.adopt_queue_object(
        row.cluster,
        row.KIND,
        row.name,
        getattr(row, "namespace", None),
        timezone.now(),
        actor=signed_in(request),
    )
    messages.info(request, f"{row.key} adopted: edit it here from now on")
    return redirect(object_url(row))


def objects_by_cluster(clusters: list[Cluster]) -> dict[int, list[dict[str, Any]]]:
    """Per cluster pk, every Kueue object with its page: one query per kind."""
    found: dict[int, list[dict[str, Any]]] = {cluster.pk: [] for cluster in clusters}
    by_pk = {cluster.pk: cluster for cluster in clusters}
    for model in QUEUE_MODELS.values():
        for row in model._default_manager.filter(cluster__in=clusters):
            row.cluster = by_pk[row.cluster_id]
            found[row.cluster_id].append(
                {"key": row.key, "url": object_url(row), "managed_elsewhere": row.managed_elsewhere}
            )
    return found
