"""Workloads: the live table, one workload's story, scaling it, and submitting with what-if."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone

from teams.models import TeamNamespace
from teams.services import Scope
from teams.visibility import redact
from web import density, panels
from web.forms.workloads import (
    ScaleForm,
    SubmitForm,
    WorkloadFilterForm,
    submittable_namespaces,
)
from web.views.common import Parts, caller, page, signed_in
from workloads import explain, manifests, runtime, services, whatif
from workloads.models import Checkpoint, KubeObject, LocalQueue, Pod, Slice, Workload
from workloads.status import WORKLOAD_KINDS, object_status, object_statuses
from workloads.tenancy import SubmissionRefused, submission_check

SCALABLE_KINDS = ("Deployment", "LeaderWorkerSet")


def _visible_objects(scope: Scope) -> Any:
    # With the opaque owners of workloads submitted outside Accelplane (a RayJob, a Pod).
    shown = Q(kind__in=WORKLOAD_KINDS) | Q(managed_elsewhere=True)
    objects = KubeObject.objects.filter(shown).select_related("cluster")
    objects = objects.prefetch_related("workloads")  # each row shows its queue
    return scope.filter(objects).order_by("cluster__name", "namespace", "kind", "name")


def _row(
    obj: KubeObject, status: dict[str, Any], held: dict[str, int], now: datetime
) -> dict[str, Any]:
    workloads = list(obj.workloads.all())
    wait, waiting = _wait(workloads, now)
    return {
        "object": obj,
        "key": f"{obj.cluster.name}:{obj.key}",
        "queue": workloads[0].queue_name if workloads else "",
        "priority": max((w.priority for w in workloads), default=None),
        "age": now - obj.created_at,
        "wait": wait,
        "waiting": waiting,
        "gpus": held.get("gpus", 0),
        "tpus": held.get("tpus", 0),
        **status,
    }


def _wait(rows: list[Workload], now: datetime) -> tuple[timedelta | None, bool]:
    """How long the object waited for Kueue: from a workload's queue timestamp (its creation,
    or its eviction when Kueue requeues by it) to its admission; for one still pending, so far
    (True). The pending workload that has waited longest, else the admitted one that did."""
    active = [w for w in rows if w.phase in Workload.ACTIVE_PHASES]
    pending = [now - w.queued_at for w in active if w.phase == Workload.Phase.PENDING]
    if pending:
        return max(pending), True
    admitted = [w.admitted_at - w.queued_at for w in active if w.admitted_at is not None]
    return (max(admitted), False) if admitted else (None, False)


def _filtered_rows(scope: Scope, data: dict[str, Any], objects: Any) -> list[dict[str, Any]]:
    if data.get("cluster"):
        objects = objects.filter(cluster__name=data["cluster"])
    if data.get("team"):
        team_namespaces = TeamNamespace.objects.filter(team__name=data["team"])
        objects = objects.filter(namespace__in=team_namespaces.values("name"))
    if data.get("queue"):
        objects = objects.filter(workloads__queue_name=data["queue"]).distinct()
    if data.get("kind"):
        objects = objects.filter(kind=data["kind"])
    objects = list(objects)
    statuses = object_statuses(objects)
    held = density.held_by_owner(obj.pk for obj in objects)
    now = timezone.now()
    rows = [_row(obj, statuses[obj.pk], held.get(obj.pk, {}), now) for obj in objects]
    return [r for r in rows if not data.get("phase") or r["phase"] == data["phase"]]


@login_required
def workload_list(request: HttpRequest) -> HttpResponse:
    """Every workload the caller may see, filtered by cluster, team, queue, phase and kind;
    live. A filter value that names nothing is a 400 saying which, with no rows."""
    scope = caller(request)
    filters = WorkloadFilterForm(scope, request.GET)
    if not filters.is_valid():
        nothing: Parts = {"row": lambda: {"rows": []}}
        return page(request, "web/workloads.html", nothing, {"filters": filters}, status=400)
    data = filters.cleaned_data

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
    # The opaque owner of a workload submitted outside Accelplane has a page too (the list
    # links it), whatever its kind.
    shown = obj is not None and (obj.kind in WORKLOAD_KINDS or obj.managed_elsewhere)
    if obj is None or not shown or not caller(request).can_read(obj.namespace):
        raise Http404("no such workload")
    return obj


@login_required
def workload_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """Timeline, Kueue workloads, checkpoints, steps lost, placement and why it is pending."""
    obj = _readable_object(request, pk)
    scope = caller(request)

    def status() -> dict[str, Any]:
        rows = list(obj.workloads.order_by("replica_index"))
        state = object_status(obj)
        return {"status": state, "workloads": rows, "training": _training(obj, rows, state)}

    def explained() -> dict[str, Any]:
        now = timezone.now()
        rows = obj.workloads.select_related("owner", "cluster").order_by("replica_index")
        pods = list(Pod.objects.filter(owner=obj))
        return {
            "explained": redact(explain.explain_all(rows, now), scope),
            "pods": len(pods),
            "unplaced": runtime.unplaced(obj.cluster, pods),
        }

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
        "can_scale": _scalable(obj) and scope.can_write(obj.namespace),
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


def _training(
    obj: KubeObject, rows: list[Workload], state: dict[str, Any]
) -> dict[str, int] | None:
    """The running job's step now, beside the latest checkpoint the status counted: one
    checkpoint figure on the page, refreshed with the status on every progress event."""
    running = next((r for r in rows if r.training_started_at is not None), None)
    if running is None or running.phase != Workload.Phase.ADMITTED:
        return None
    running.owner = obj
    step, checkpoint = runtime.current_step(running, timezone.now()), state["checkpointStep"]
    total = obj.simulation.get("total_steps") or 0
    return {
        "step": step,
        "total": total,
        "checkpoint": checkpoint,
        "at_risk": max(0, step - checkpoint),
    }


def _scalable(obj: KubeObject) -> bool:
    # One submitted outside Accelplane is changed where it was made (services refuses it).
    return obj.kind in SCALABLE_KINDS and not obj.managed_elsewhere


def _scale(request: HttpRequest, obj: KubeObject) -> tuple[ScaleForm, bool]:
    if not _scalable(obj) or not caller(request).can_write(obj.namespace):
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
