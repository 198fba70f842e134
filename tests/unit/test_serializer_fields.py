"""The workload serializers render with one set of fields per class, bound once
(api/serializers.py `RendersWithSharedFields`): what they render is what DRF renders with
fields of the serializer's own, and threads rendering at once each get their own object."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from unittest import mock

from rest_framework import serializers

from api import serializers as s
from tests.support import NAMESPACE, at, job
from workloads import admission, services
from workloads.models import KubeObject

SHARED = (s.KueueWorkloadSerializer, s.WorkloadObjectSerializer)


def _objects(gpu_queues):
    # Three Jobs of 6 GPUs in a queue of 6 (one admitted, with its flavors and conditions; two
    # pending), as the API reads them.
    for name in ("first", "second", "third"):
        services.apply(
            gpu_queues,
            job(name=name, pods=3, gpus=2),
            source="job.yaml",
            now=at(),
            namespace=NAMESPACE,
        )
    admission.advance(gpu_queues, at(), at(minutes=1))
    return list(
        KubeObject.objects.select_related("cluster")
        .prefetch_related(s.WITH_WORKLOADS)
        .order_by("id")
    )


def _as_drf_renders(objects):
    generic = serializers.ModelSerializer.to_representation
    with (
        mock.patch.object(s.KueueWorkloadSerializer, "to_representation", generic),
        mock.patch.object(s.WorkloadObjectSerializer, "to_representation", generic),
    ):
        return s.WorkloadObjectSerializer(objects, many=True).data


def test_shared_fields_render_what_drf_renders(gpu_queues):
    objects = _objects(gpu_queues)
    rendered = s.WorkloadObjectSerializer(objects, many=True).data

    assert {row["workloads"][0]["phase"] for row in rendered} == {"Admitted", "Pending"}
    assert rendered == _as_drf_renders(objects)
    assert all("_renderer" in vars(cls) for cls in SHARED)


def test_threads_rendering_at_once_each_get_their_own_object(gpu_queues):
    objects = _objects(gpu_queues) * 50
    expected = [s.WorkloadObjectSerializer(obj).data for obj in objects]

    with ThreadPoolExecutor(8) as pool:
        rendered = list(pool.map(lambda obj: s.WorkloadObjectSerializer(obj).data, objects))

    assert rendered == expected


def test_a_subclass_renders_with_fields_of_its_own(gpu_queues):
    class WithOwnerName(s.WorkloadObjectSerializer):
        owner = serializers.CharField(source="name", read_only=True)

        class Meta(s.WorkloadObjectSerializer.Meta):
            fields = [*s.WorkloadObjectSerializer.Meta.fields, "owner"]

    obj = _objects(gpu_queues)[0]
    assert WithOwnerName(obj).data["owner"] == obj.name
    assert "owner" not in s.WorkloadObjectSerializer(obj).data
