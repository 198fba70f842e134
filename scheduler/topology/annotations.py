"""A PodSet's topology request from its pod template annotations, validated as Kueue's webhook
does (`pkg/controller/jobframework/tas.go`, `tas_validation.go`)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from scheduler.topology.values import TopologyRequest

REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_LEVEL_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"

_TAS_ANNOTATIONS = (
    REQUIRED_ANNOTATION,
    PREFERRED_ANNOTATION,
    UNCONSTRAINED_ANNOTATION,
    SLICE_LEVEL_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
    GROUP_ANNOTATION,
)
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
_INT32 = re.compile(r"[+-]?[0-9]+")


def request_from_annotations(annotations: Mapping[str, str]) -> TopologyRequest | None:
    """The PodSet's topology request; None when it carries no TAS annotation.

    Raises ValueError for what Kueue's webhook rejects (ValidateTASPodSetRequest)."""
    if not any(key in annotations for key in _TAS_ANNOTATIONS):
        return None
    problems = _annotation_problems(annotations)
    if problems:
        raise ValueError("; ".join(problems))
    required = annotations.get(REQUIRED_ANNOTATION)
    preferred = None if required is not None else annotations.get(PREFERRED_ANNOTATION)
    unconstrained = required is None and preferred is None and _unconstrained(annotations)
    slice_level = annotations.get(SLICE_LEVEL_ANNOTATION)
    size = annotations.get(SLICE_SIZE_ANNOTATION)
    main = required is not None or preferred is not None
    return TopologyRequest(
        required=required,
        preferred=preferred,
        unconstrained=unconstrained,
        slice_level=slice_level,
        slice_size=int(size) if size is not None else None,
        group=annotations.get(GROUP_ANNOTATION) if main else None,
    )


def _unconstrained(annotations: Mapping[str, str]) -> bool:
    return annotations.get(UNCONSTRAINED_ANNOTATION) in _TRUE


def _annotation_problems(annotations: Mapping[str, str]) -> list[str]:
    problems = []
    main = [k for k in _TAS_ANNOTATIONS[:3] if k in annotations]
    if len(main) > 1:
        problems.append(f"must not contain more than one topology annotation: {main}")
    value = annotations.get(UNCONSTRAINED_ANNOTATION)
    if value is not None and value not in _TRUE | _FALSE:
        problems.append(f"{UNCONSTRAINED_ANNOTATION}: {value!r} must be a boolean value")
    problems += _slice_problems(annotations)
    problems += _group_problems(annotations)
    return problems


def _slice_problems(annotations: Mapping[str, str]) -> list[str]:
    level, size = annotations.get(SLICE_LEVEL_ANNOTATION), annotations.get(SLICE_SIZE_ANNOTATION)
    if level is not None and size is None:
        return [f"{SLICE_SIZE_ANNOTATION} must be set when {SLICE_LEVEL_ANNOTATION} is"]
    if size is None:
        return []
    if level is None:
        return [f"{SLICE_SIZE_ANNOTATION} may not be set without {SLICE_LEVEL_ANNOTATION}"]
    if not _INT32.fullmatch(size) or not -(2**31) <= int(size) < 2**31:
        return [f"{SLICE_SIZE_ANNOTATION}: {size!r} must be a numeric value"]
    if int(size) < 1:
        return [f"{SLICE_SIZE_ANNOTATION}: {size!r} must be greater than or equal to 1"]
    return []


def _group_problems(annotations: Mapping[str, str]) -> list[str]:
    group = annotations.get(GROUP_ANNOTATION)
    if group is None:
        return []
    problems = []
    if group.isascii() and group.isdigit():
        problems.append(f"{GROUP_ANNOTATION}: {group!r} must not be a number")
    if SLICE_LEVEL_ANNOTATION in annotations or SLICE_SIZE_ANNOTATION in annotations:
        problems.append(f"{GROUP_ANNOTATION} may not be set together with slice annotations")
    if REQUIRED_ANNOTATION not in annotations and PREFERRED_ANNOTATION not in annotations:
        problems.append(f"{GROUP_ANNOTATION} needs {REQUIRED_ANNOTATION} or {PREFERRED_ANNOTATION}")
    return problems
