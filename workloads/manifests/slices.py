"""The GKE TPU slice controller's webhook: a slice-topology annotation becomes a TAS request.

`cloud.google.com/gke-tpu-slice-topology: AxBxC` on a pod template (seeds.md §B.4,
tpu-slice-controller `internal/webhooks`): sub-slice shapes are placed inside one cube on
their partition level; larger shapes are super-slices joining whole 4x4x4 cubes of a block.
A LeaderWorkerSet group whose leader and workers ask for the same sub-slice shape is one slice:
both PodSets share a podset-group-name and require the shape's partition, so Kueue places the
whole group (leader plus workers) in one partition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from clusters.catalog import CUBE_TOPOLOGY, LABEL_TOPOLOGY_BLOCK, partition_id_label
from scheduler.topology import (
    GROUP_ANNOTATION,
    REQUIRED_ANNOTATION,
    SLICE_LEVEL_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
)

SLICE_TOPOLOGY_ANNOTATION = "cloud.google.com/gke-tpu-slice-topology"
SUBSLICE_SHAPES = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")
CUBE_CHIPS = 64
MAX_SUPERSLICE_CHIPS = 9216
TPU = "google.com/tpu"
SLICE_GROUP = "tpu-slice"
"""The podset-group-name of a LeaderWorkerSet group that is one slice."""


def shape_dims(shape: str) -> tuple[int, ...] | None:
    parts = shape.split("x")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def superslice_problem(dims: tuple[int, ...]) -> str | None:
    """Why a super-slice shape is invalid, or None (seeds.md §B.4)."""
    if any(d == 0 or d % 4 for d in dims):
        return "every dimension of a super-slice must be a multiple of 4"
    if list(dims) != sorted(dims):
        return "the dimensions of a super-slice must be non-decreasing (AxBxC with A <= B <= C)"
    if math.prod(dims) > MAX_SUPERSLICE_CHIPS:
        return f"a super-slice has at most {MAX_SUPERSLICE_CHIPS} chips"
    return None


def slice_annotations(
    shape: str,
    slice_pods: int,
    total_pods: int,
    requests: Mapping[str, int],
    group: str | None = None,
) -> dict[str, str]:
    """The TAS annotations the webhook writes for `shape`.

    `slice_pods` is the pods of one Job (parallelism) or LWS group; `total_pods` the PodSet's
    pod count; `group` the podset-group-name of PodSets that are one sub-slice together.
    Raises ValueError with the reason for shapes the webhook rejects."""
    dims = shape_dims(shape)
    if dims is None:
        raise ValueError(f"{shape!r} is not a TPU topology of the form AxBxC")
    if shape in SUBSLICE_SHAPES and group is not None:
        return {REQUIRED_ANNOTATION: partition_id_label(shape), GROUP_ANNOTATION: group}
    if shape in SUBSLICE_SHAPES:
        return _annotations(partition_id_label(shape), slice_pods)
    problem = superslice_problem(dims)
    if problem:
        raise ValueError(
            f"{shape!r} is not a sub-slice shape ({', '.join(SUBSLICE_SHAPES)}); {problem}"
        )
    cubes = math.prod(dims) // CUBE_CHIPS
    if total_pods % cubes:
        raise ValueError(
            f"{total_pods} pods cannot be spread evenly over the {cubes} cubes of {shape}"
        )
    size = total_pods // cubes
    chips = requests.get(TPU, 0) // 1000
    if chips * size != CUBE_CHIPS:
        raise ValueError(
            f"{size} pods per cube x {chips} {TPU} per pod must be {CUBE_CHIPS} chips (one cube)"
        )
    return _annotations(partition_id_label(CUBE_TOPOLOGY), size)


def _annotations(slice_level: str, size: int) -> dict[str, str]:
    return {
        REQUIRED_ANNOTATION: LABEL_TOPOLOGY_BLOCK,
        SLICE_LEVEL_ANNOTATION: slice_level,
        SLICE_SIZE_ANNOTATION: str(size),
    }
