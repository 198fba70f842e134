"""Workloads: the live table, one workload's story, scaling it, and submitting with what-if."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone

from teams.models import TeamNamespace
from teams.services import Scope
from teams.visibility import redact
from web import panels
from web.forms.workloads import (
    ScaleForm,
    SubmitForm,
    WorkloadFilterForm,
    submittable_namespaces,
)
from web.views.common import caller, page, signed_in
from workloads import explain, manifests, services, whatif
from workloads.models import Checkpoint, KubeObject, LocalQueue, Pod, Slice
from workloads.status import WORKLOAD_KINDS, object_status, object_statuses
from workloads.tenancy import SubmissionRefused, submission_check

SCALABLE_KINDS = ("Deployment", "LeaderWorkerSet")


def _visible_objects(scope: Scope) -> Any:
    objects = KubeObject.objects.filter(kind__in=WORKLOAD_KINDS).select_related("cluster")
    objects = objects.prefetch_related("workloads")  # each row shows its queue
    return scope.filter(objects).order_by("cluster__name", "namespace", "kind", "name")


def _row(obj: KubeObject, status: dict[str, Any]) -> dict[str, Any]:
    workloads = list(obj.workloads.all())
    return {
        "object": obj,
        "key": f"{obj.cluster.name}:{obj.key}",
        "queue": workloads[0].queue_name if workloads else "",
        **status,
    }


def _filtered_rows(scope: Scope, data: dict[str, Any], objects: Any) -> list[dict[str, Any]]:
    if data.get("team"):
        team_namespaces = TeamNamespace.objects.filter(team__name=data["team"])
        objects = objects.filter(namespace__in=team_namespaces.values("name"))
    if data.get("queue"):
        objects = objects.filter(workloads__queue_name=data["queue"]).distinct()
    if data.get("kind"):
        objects = objects.filter(kind=data["kind"])
    objects = list(objects)
    statuses = object_statuses(objects)
    rows = [_row(obj, statuses[obj.pk]) for obj in objects]
    return [r for r in rows if not data.get("phase") or r["phase"] == data["phase"]]


@login_required
def workload_list(request: HttpRequest) -> HttpResponse:
    """Every workload the caller may see, filtered by team, queue, phase and kind; live."""
    scope = caller(request)
    filters = WorkloadFilterForm(scope, request.GET)
    data = filters.cleaned_data if filters.is_valid() else {}

    def rows() -> dict[str, Any]:
        objects = _visible_objects(scope)
        if "object" in request.GET:
            # One row, for an event about it: none if it is gone or no longer matches.
            cluster, _, key = request.GET["object"].partition(":")
            kind, *rest = key.split("/")
            namespace, name = rest if len(rest) == 2 else ("", "")
            objects = objects.filter(
                cluster__name=cluster, kind=kind, namespace=namespace, name=name
            )
        return {"rows": _filtered_rows(scope, data, objects)}

    return page(request, "web/workloads.html", {"row": rows}, {"filters": filters})


def _readable_object(request: HttpRequest, pk: int) -> KubeObject:
    obj = KubeObject.objects.select_related("cluster").filter(pk=pk).first()
    if obj is None or obj.kind not in WORKLOAD_KINDS or not caller(request).can_read(obj.namespace):
        raise Http404("no such workload")
    return obj


@login_required
def workload_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """Timeline, Kueue workloads, checkpoints, steps lost, placement and why it is pending."""
    obj = _readable_object(request, pk)
    scope = caller(request)

    def status() -> dict[str, Any]:
        rows = list(obj.workloads.order_by("replica_index"))
        return {"status": object_status(obj), "workloads": rows}

    def explained() -> dict[str, Any]:
        now = timezone.now()
        rows = obj.workloads.select_related("owner", "cluster").order_by("replica_index")
        return {"explained": redact([explain.explain(row, now) for row in rows], scope)}

    def checkpoints() -> dict[str, Any]:
        return {"checkpoints": list(Checkpoint.objects.filter(owner=obj).order_by("-step"))}

    def placement() -> dict[str, Any]:
        pods = Pod.objects.filter(owner=obj).select_related("node__node_pool", "workload")
        slices = Slice.objects.filter(workload__owner=obj)
        return {"pods": list(pods), "slices": list(slices)}

    context = {
        "object": obj,
        "timeline": panels.timeline(scope, obj),
        "skipped": " ".join(panels.TIMELINE_SKIPS),
        "can_scale": obj.kind in SCALABLE_KINDS and scope.can_write(obj.namespace),
        "scale_form": ScaleForm(initial={"replicas": obj.manifest.get("spec", {}).get("replicas")}),
    }
    parts = {
        "status": status,
        "explain": explained,
        "checkpoints": checkpoints,
        "placement": placement,
    }
    if request.method == "POST":
        context["scale_form"], done = _scale(request, obj)
        if done:
            return redirect("web:workload", pk=obj.pk)
        return page(request, "web/workload.html", parts, context, status=400)
    return page(request, "web/workload.html", parts, context)


def _scale(request: HttpRequest, obj: KubeObject) -> tuple[ScaleForm, bool]:
    if obj.kind not in SCALABLE_KINDS or not caller(request).can_write(obj.namespace):
        raise PermissionDenied("you may not scale this workload")
    form = ScaleForm(request.POST)
    if not form.is_valid():
        return form, False
    try:
        services.scale(obj, form.cleaned_data["replicas"], timezone.now())
    except manifests.ManifestError as error:
        form.add_error("replicas", str(error))
        return form, False
    return form, True


@login_required
def submit(request: HttpRequest) -> HttpResponse:
    """Paste or upload manifests; see what would happen (what-if) before applying them."""
    scope = caller(request)
    if not (scope.everything or scope.writable):
        raise PermissionDenied("you have no namespace to submit to")
    form = SubmitForm(scope, request.POST or None, request.FILES or None)
    namespaces = submittable_namespaces(scope)
    queues = LocalQueue.objects.filter(namespace__in=namespaces).select_related("cluster")
    context: dict[str, Any] = {"form": form, "local_queues": queues.order_by("cluster__name")}
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            if request.POST.get("action") == "apply":
                return _apply(request, scope, data)
            result = whatif.whatif(
                data["cluster"],
                data["manifest"],
                "pasted YAML",
                timezone.now(),
                namespace=data["namespace"],
                authorize=submission_check(scope),
            )
            context["whatif"] = redact(result, scope)
        except manifests.ManifestError as error:
            form.add_manifest_error(error)
        except SubmissionRefused as error:
            form.add_error("namespace", str(error))
    status = 400 if form.errors else 200
    return page(request, "web/submit.html", {}, context, status=status)


def _apply(request: HttpRequest, scope: Scope, data: dict[str, Any]) -> HttpResponse:
    applied = services.apply(
        data["cluster"],
        data["manifest"],
        source="pasted YAML",
        now=timezone.now(),
        namespace=data["namespace"],
        authorize=submission_check(scope),
        actor=signed_in(request),
    )
    keys = [a.key for a in applied]
    first = next((k for k in keys if k.split("/")[0] in WORKLOAD_KINDS), None)
    if first is not None:
        kind, namespace, name = first.split("/")
        obj = KubeObject.objects.filter(
            cluster=data["cluster"], kind=kind, namespace=namespace, name=name
        ).first()
        if obj is not None:
            return redirect("web:workload", pk=obj.pk)
    return redirect("web:workloads")
