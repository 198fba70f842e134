"""The objects Kueue manages, as the Workloads Kueue would build from them.

Job -> PodSets mapping per integration (`pkg/controller/jobs/{job,jobset,leaderworkerset}`,
Deployment via the pod integration): kueue-semantics.md sections 1 and 14.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings

from workloads.manifests import limits
from workloads.manifests.documents import Document
from workloads.manifests.fields import INT32_MAX, Fields, join, label_key_problem
from workloads.manifests.podsets import PodSetSpec, pod_set
from workloads.manifests.slices import SLICE_GROUP, SLICE_TOPOLOGY_ANNOTATION
from workloads.manifests.training import checkpoint_steps

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
# Set on a slice's hosts by the GKE slice controller: a Job or LWS group asking for a slice
# shape gets a slice of its own, so exclusivity on this key holds by construction.
SLICE_NODE_LABEL = "cloud.google.com/gke-tpu-slice"
SIM_PREFIX = "sim.accelplane.dev/"
SIM_ANNOTATIONS = frozenset({"startup", "step-time", "total-steps", "checkpoint-every"})
SCALABLE_KINDS = ("Deployment", "LeaderWorkerSet")


@dataclass(frozen=True, slots=True)
class WorkloadShape:
    queue_name: str | None
    priority_class: str | None
    """The kueue.x-k8s.io/priority-class label: a WorkloadPriorityClass name."""
    pod_priority_class: str | None
    """The first pod template's priorityClassName: a PriorityClass name."""
    pod_sets: tuple[PodSetSpec, ...]
    """The PodSets of one Kueue Workload."""
    replicas: int
    """Deployment: pods; LeaderWorkerSet: groups; Job and JobSet: 1."""
    per_replica: bool
    """True when each replica is its own Workload (Deployment pods, LeaderWorkerSet groups)."""
    sim: dict[str, str]
    """Annotations under sim.accelplane.dev/, without the prefix."""
    checkpoint_steps: int | None = None
    """The cadence the training code reads from the manifest (training.checkpoint_steps)."""


_Built = tuple[int, bool, list[PodSetSpec]]


def workload_shape(doc: Document) -> WorkloadShape | None:
    """The Workload(s) Kueue would create for `doc`; None for kinds Kueue does not manage."""
    build = _SHAPES.get(doc.kind)
    if build is None:
        return None
    fields = Fields.of(doc)
    spec = fields.mapping(doc.body, "spec", "", required=True)
    replicas, per_replica, pod_sets = build(fields, doc, spec)
    metadata = doc.body["metadata"]
    labels: Mapping[str, str] = metadata.get("labels") or {}
    # Kueue's pod integration reads the pods' labels; its Deployment webhook copies the
    # Deployment's labels there, so a label on either place counts.
    template_labels = pod_sets[0].labels if doc.kind == "Deployment" else {}
    return WorkloadShape(
        queue_name=labels.get(QUEUE_LABEL) or template_labels.get(QUEUE_LABEL) or None,
        priority_class=labels.get(PRIORITY_LABEL) or template_labels.get(PRIORITY_LABEL) or None,
        pod_priority_class=pod_sets[0].priority_class_name,
        pod_sets=tuple(pod_sets),
        replicas=replicas,
        per_replica=per_replica,
        sim=_sim_annotations(fields, metadata.get("annotations") or {}),
        checkpoint_steps=checkpoint_steps(doc.body),
    )


def check_pods_per_request(shapes: Iterable[tuple[Document, WorkloadShape]]) -> None:
    """Refuse a request whose objects make more than ACCELPLANE_MAX_PODS_PER_REQUEST pods."""
    total = 0
    for doc, shape in shapes:
        total += shape.replicas * sum(p.count for p in shape.pod_sets)
        if total > settings.ACCELPLANE_MAX_PODS_PER_REQUEST:
            raise Fields.of(doc).error(
                None,
                total,
                f"brings the request to {total} pods; one request may make at most "
                f"{settings.ACCELPLANE_MAX_PODS_PER_REQUEST}",
            )


def scale(doc: Document, replicas: int) -> dict[str, Any]:
    """`kubectl scale`: the body with spec.replicas changed (Deployment, LeaderWorkerSet)."""
    fields = Fields.of(doc)
    if doc.kind not in SCALABLE_KINDS:
        raise fields.error(
            "spec.replicas",
            replicas,
            f"{doc.kind} cannot be scaled; only {' and '.join(SCALABLE_KINDS)} can",
        )
    fields.integer(
        {"replicas": replicas}, "replicas", "spec", maximum=settings.ACCELPLANE_MAX_REPLICAS
    )
    body = copy.deepcopy(doc.body)
    spec = fields.mapping(body, "spec", "", required=True)
    spec["replicas"] = replicas
    return body


def _sim_annotations(fields: Fields, annotations: Mapping[str, str]) -> dict[str, str]:
    sim = {}
    for key, value in annotations.items():
        if key.startswith(SIM_PREFIX):
            name = key.removeprefix(SIM_PREFIX)
            if name not in SIM_ANNOTATIONS:
                raise fields.error(
                    join("metadata.annotations", key),
                    value,
                    f"unknown simulation annotation; known: {', '.join(sorted(SIM_ANNOTATIONS))}",
                )
            sim[name] = value
    return sim


def job_pod_count(fields: Fields, job_spec: Mapping[str, Any], base: str) -> int:
    """Kueue's podsCount: parallelism (default 1), capped by completions when set."""
    indexed = job_spec.get("completionMode") == "Indexed"
    parallelism = fields.integer(
        job_spec,
        "parallelism",
        base,
        default=1,
        maximum=limits.MAX_INDEXED_JOB_PARALLELISM if indexed else INT32_MAX,
    )
    completions = fields.optional_integer(
        job_spec,
        "completions",
        base,
        maximum=limits.MAX_INDEXED_JOB_COMPLETIONS if indexed else INT32_MAX,
    )
    count = parallelism if completions is None else min(parallelism, completions)
    field = "parallelism" if completions is None or parallelism <= completions else "completions"
    _check_pods(fields, join(base, field), count, count)
    return count


def _check_pods(fields: Fields, path: str, value: int, pods: int) -> None:
    """Refuse an object of more than ACCELPLANE_MAX_PODS_PER_OBJECT pods: the simulator builds
    each one, in the request that applies or scales it."""
    limit = settings.ACCELPLANE_MAX_PODS_PER_OBJECT
    if pods > limit:
        raise fields.error(
            path,
            value,
            f"makes {pods} pods; an object may have at most {limit}",
        )


def _job(fields: Fields, doc: Document, spec: Mapping[str, Any]) -> _Built:
    count = job_pod_count(fields, spec, "spec")
    template = fields.mapping(spec, "template", "spec", required=True)
    main = pod_set(
        fields,
        template,
        "spec.template",
        name="main",
        count=count,
        min_count=_min_parallelism(fields, doc, count),
    )
    return 1, False, [main]


def _min_parallelism(fields: Fields, doc: Document, count: int) -> int | None:
    """Partial admission's lower bound; Kueue's job webhook wants 0 < value < pod count."""
    annotations = doc.body["metadata"].get("annotations") or {}
    value = annotations.get(MIN_PARALLELISM)
    if value is None:
        return None
    path = join("metadata.annotations", MIN_PARALLELISM)
    if not value.isdigit():
        raise fields.error(path, value, f"{value!r} is not an integer")
    if not 0 < int(value) < count:
        raise fields.error(
            path, value, f"{value} must be between 1 and {count - 1} (less than the pod count)"
        )
    return int(value)


def _deployment(fields: Fields, doc: Document, spec: Mapping[str, Any]) -> _Built:
    replicas = _replicas(fields, spec, "spec")
    _check_pods(fields, "spec.replicas", replicas, replicas)
    template = fields.mapping(spec, "template", "spec", required=True)
    # Kueue's pod integration: every replica pod is its own single-pod Workload.
    return replicas, True, [pod_set(fields, template, "spec.template", name="main", count=1)]


def _jobset(fields: Fields, doc: Document, spec: Mapping[str, Any]) -> _Built:
    pod_sets: list[PodSetSpec] = []
    for path, job in fields.mappings(spec, "replicatedJobs", "spec", min_items=1):
        name = fields.name(fields.string(job, "name", path), join(path, "name"), "label")
        if any(p.name == name for p in pod_sets):
            raise fields.error(join(path, "name"), name, f"replicatedJob {name!r} appears twice")
        replicas = _replicas(fields, job, path)
        template = fields.mapping(job, "template", path, required=True)
        job_path = join(join(path, "template"), "spec")
        job_spec = fields.mapping(template, "spec", join(path, "template"), required=True)
        per_job = job_pod_count(fields, job_spec, job_path)
        count = replicas * per_job
        pods = count + sum(p.count for p in pod_sets)
        _check_pods(fields, join(path, "replicas"), replicas, pods)
        pod_template = fields.mapping(job_spec, "template", job_path, required=True)
        template_path = join(job_path, "template")
        built = pod_set(
            fields, pod_template, template_path, name=name, count=count, slice_pods=per_job
        )
        # JobSet reads the annotation on one replicated Job's template, else on the JobSet.
        key = _exclusive_key(fields, template, join(path, "template")) or _exclusive_key(
            fields, doc.body, ""
        )
        pod_sets.append(_exclusive(built, key, per_job))
    return 1, False, pod_sets


def _annotation(obj: Mapping[str, Any], key: str) -> str | None:
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    value = annotations.get(key) if isinstance(annotations, Mapping) else None
    return value if isinstance(value, str) and value else None


def _exclusive_key(
    fields: Fields, obj: Mapping[str, Any], base: str, annotation: str = JOBSET_EXCLUSIVE
) -> str | None:
    """The node label a JobSet or LWS asks to place each group on exclusively, validated."""
    key = _annotation(obj, annotation)
    problem = label_key_problem(key, "topology key") if key else None
    if problem:
        path = join(join(join(base, "metadata"), "annotations"), annotation)
        raise fields.error(path, key, problem)
    return key


def _exclusive(built: PodSetSpec, key: str | None, group_pods: int | None) -> PodSetSpec:
    if key is None or (key == SLICE_NODE_LABEL and SLICE_TOPOLOGY_ANNOTATION in built.annotations):
        return built
    return replace(built, exclusive_topology=key, exclusive_group_pods=group_pods)


def _leader_worker_set(fields: Fields, doc: Document, spec: Mapping[str, Any]) -> _Built:
    replicas = _replicas(fields, spec, "spec")
    base = "spec.leaderWorkerTemplate"
    group = fields.mapping(spec, "leaderWorkerTemplate", "spec", required=True)
    size = fields.integer(group, "size", base, default=1, minimum=1)
    _check_pods(fields, join(base, "size"), size, size)
    _check_pods(fields, "spec.replicas", replicas, replicas * size)
    worker = fields.mapping(group, "workerTemplate", base, required=True)
    worker_path = join(base, "workerTemplate")
    leader = fields.optional_mapping(group, "leaderTemplate", base)
    # Kueue's LWS integration (leaderworkerset_reconciler.go podSets): without a leader
    # template the whole group is one PodSet "main" of `size` pods.
    key = _exclusive_key(fields, doc.body, "", LWS_EXCLUSIVE)
    if leader is None:
        main = pod_set(fields, worker, worker_path, name="main", count=size)
        return replicas, True, [_exclusive(main, key, None)]
    # Kueue keeps a count-0 "worker" PodSet for size 1; it reserves nothing, so it is left out
    # here (the worker template is still validated).
    one_slice = _slice_group(leader, worker) if size > 1 else None
    workers = pod_set(
        fields, worker, worker_path, name="worker", count=size - 1, slice_group=one_slice
    )
    leaders = pod_set(
        fields, leader, join(base, "leaderTemplate"), name="leader", count=1, slice_group=one_slice
    )
    pod_sets = [leaders, workers] if size > 1 else [leaders]
    return replicas, True, [_exclusive(p, key, None) for p in pod_sets]


def _replicas(fields: Fields, spec: Mapping[str, Any], base: str) -> int:
    return fields.integer(
        spec, "replicas", base, default=1, maximum=settings.ACCELPLANE_MAX_REPLICAS
    )


def _slice_group(leader: Mapping[str, Any], worker: Mapping[str, Any]) -> str | None:
    """The GKE slice webhook makes leader and workers one slice when both ask for one shape."""
    shape = _slice_shape(leader)
    return SLICE_GROUP if shape is not None and shape == _slice_shape(worker) else None


def _slice_shape(template: Mapping[str, Any]) -> object:
    """The template's slice-topology annotation, if it has one (pod_set validates the rest)."""
    return _annotation(template, SLICE_TOPOLOGY_ANNOTATION)


_SHAPES: dict[str, Callable[[Fields, Document, Mapping[str, Any]], _Built]] = {
    "Job": _job,
    "Deployment": _deployment,
    "JobSet": _jobset,
    "LeaderWorkerSet": _leader_worker_set,
}
