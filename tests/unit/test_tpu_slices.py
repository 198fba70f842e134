"""The GKE slice controller's webhook: slice-topology annotations become TAS requests."""

import textwrap

import pytest

from scheduler.topology import (
    REQUIRED_ANNOTATION,
    SLICE_LEVEL_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
    request_from_annotations,
)
from tests.support import tpu_jobset
from workloads.manifests import ManifestError, load_documents, workload_shape
from workloads.manifests.slices import SLICE_TOPOLOGY_ANNOTATION, slice_annotations

BLOCK = "cloud.google.com/gce-topology-block"
CUBE_LEVEL = "cloud.google.com/gke-tpu-partition-4x4x4-id"
TPU4 = {"google.com/tpu": 4000}


def jobset(shape, replicas=1, parallelism=2, chips=4):
    text = tpu_jobset("js", shape, replicas, parallelism, chips, node_selector=False)
    (doc,) = load_documents(text, source="js.yaml")
    shape_ = workload_shape(doc)
    assert shape_ is not None
    return shape_.pod_sets[0]


@pytest.mark.parametrize("shape", ["2x2x1", "2x2x2", "2x2x4", "2x4x4"])
def test_sub_slice_shape_requires_a_block_and_slices_on_its_partition_level(shape):
    annotations = slice_annotations(shape, 2, 12, TPU4)

    assert annotations == {
        REQUIRED_ANNOTATION: BLOCK,
        SLICE_LEVEL_ANNOTATION: f"cloud.google.com/gke-tpu-partition-{shape}-id",
        SLICE_SIZE_ANNOTATION: "2",
    }


def test_sub_slice_size_is_the_parallelism_of_one_job_not_the_pod_set_count():
    pod_set = jobset("2x2x2", replicas=6, parallelism=2)

    request = request_from_annotations(pod_set.annotations)

    assert pod_set.count == 12
    assert request is not None
    assert request.slice_size == 2


@pytest.mark.parametrize(
    ("shape", "pods", "size"), [("4x4x8", 32, 16), ("4x4x4", 16, 16), ("8x8x8", 128, 16)]
)
def test_super_slice_slices_on_the_cube_level_with_one_slice_per_cube(shape, pods, size):
    annotations = slice_annotations(shape, pods, pods, TPU4)

    assert annotations[SLICE_LEVEL_ANNOTATION] == CUBE_LEVEL
    assert annotations[SLICE_SIZE_ANNOTATION] == str(size)
    assert annotations[REQUIRED_ANNOTATION] == BLOCK


@pytest.mark.parametrize(
    ("shape", "problem"),
    [
        ("4x6x8", "multiple of 4"),
        ("8x4x4", "non-decreasing"),
        ("16x24x32", "at most 9216"),
        ("2x2", "AxBxC"),
        ("axbxc", "AxBxC"),
    ],
)
def test_invalid_super_slice_shape_is_rejected_with_the_rule_it_breaks(shape, problem):
    with pytest.raises(ValueError, match=problem):
        slice_annotations(shape, 32, 32, TPU4)


def test_super_slice_whose_pods_per_cube_do_not_make_64_chips_is_rejected():
    with pytest.raises(ValueError, match="64 chips"):
        slice_annotations("4x4x8", 16, 16, TPU4)


def test_invalid_slice_topology_is_rejected_at_apply_naming_the_annotation():
    with pytest.raises(ManifestError) as caught:
        jobset("3x3x3", parallelism=32)

    assert SLICE_TOPOLOGY_ANNOTATION in str(caught.value)
    assert "js.yaml" in str(caught.value)


def test_invalid_tas_annotation_is_rejected_at_apply_naming_the_annotation():
    text = """
    apiVersion: batch/v1
    kind: Job
    metadata: {name: j, namespace: llm, labels: {kueue.x-k8s.io/queue-name: lq}}
    spec:
      template:
        metadata:
          annotations: {kueue.x-k8s.io/podset-slice-required-topology: rack}
        spec:
          containers: [{name: c, image: x}]
    """
    (doc,) = load_documents(textwrap.dedent(text), source="j.yaml")

    with pytest.raises(ManifestError) as caught:
        workload_shape(doc)

    assert SLICE_SIZE_ANNOTATION in str(caught.value)
