"""How much one request may ask of the control plane (docs/api.md, "Limits").

Kubernetes' own limits are constants here: a manifest beyond them is one a real apiserver
refuses, so they are not settings. Accelplane's, where Kubernetes has none, are settings
(controlplane/settings.py, "Limits"), read when a request is checked so tests can change them.
"""

from __future__ import annotations

from typing import Any

# k8s.io/kubernetes pkg/apis/batch/validation: maxParallelismForIndexedJob and
# completionsSoftLimit (beyond it Kubernetes wants backoffLimitPerIndex, which we do not model).
MAX_INDEXED_JOB_PARALLELISM = 100_000
MAX_INDEXED_JOB_COMPLETIONS = 100_000
# apimachinery's TotalAnnotationSizeLimitB: keys and values of one object's annotations.
MAX_ANNOTATIONS_BYTES = 256 * 1024
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def is_nested_deeper(value: Any, max_depth: int) -> bool:
    """Whether lists and mappings nest more than `max_depth` levels in parsed JSON (whose
    checks and serialisers recurse); it looks no deeper than that."""
    if isinstance(value, dict):
        children = list(value.values())
    elif isinstance(value, list):
        children = value
    else:
        return False
    return max_depth == 0 or any(is_nested_deeper(child, max_depth - 1) for child in children)
