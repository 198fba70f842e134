"""Partial admission: shrinking PodSets towards their `min_count` until the workload fits.

Follows Kueue `pkg/scheduler/flavorassigner/podset_reducer.go` (PodSetReducer): the pods
that may be dropped are pooled, a binary search looks for the smallest reduction that fits,
and each PodSet gives up its share of a reduction in proportion to how much it may shrink.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from scheduler.model import PodSet, Workload

R = TypeVar("R")


def can_be_partially_admitted(workload: Workload) -> bool:
    """Kueue `workload.CanBePartiallyAdmitted`: some PodSet may run with fewer pods."""
    return any(_reducible(ps) for ps in workload.pod_sets)


def _reducible(pod_set: PodSet) -> int:
    return pod_set.count - (pod_set.count if pod_set.min_count is None else pod_set.min_count)


def search(pod_sets: Sequence[PodSet], fits: Callable[[dict[str, int]], R | None]) -> R | None:
    """Kueue `PodSetReducer.Search`: what `fits` returns for the largest counts it accepts.

    `fits` gets PodSet name -> pod count and returns None when those counts do not fit. As
    Kueue's `sort.Search`, this assumes that fewer pods never fit worse."""
    deltas = [_reducible(ps) for ps in pod_sets]
    total = sum(deltas)
    if total == 0:
        return None
    found: R | None = None
    low, high = 0, total + 1  # reductions 0 (full counts) .. total (every PodSet at min_count)
    while low < high:
        middle = (low + high) // 2
        counts = {
            ps.name: ps.count - delta * middle // total
            for ps, delta in zip(pod_sets, deltas, strict=True)
        }
        result = fits(counts)
        if result is None:
            low = middle + 1
        else:
            found, high = result, middle
    return found
