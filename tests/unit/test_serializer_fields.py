"""The API's serializers build their fields once per class (api/serializers.py) and give each
instance copies of its own to bind: concurrent requests render with fields bound to their own
serializer, never to another's, and the class's stay unbound."""

from __future__ import annotations

from api import serializers as s
from workloads.models import KubeObject, Workload


def test_each_serializer_binds_fields_of_its_own():
    for serializer_class, model in (
        (s.KueueWorkloadSerializer, Workload),
        (s.WorkloadObjectSerializer, KubeObject),
    ):
        first, second = serializer_class(model()), serializer_class(model())
        for name, field in first.fields.items():
            other = second.fields[name]
            assert field is not other
            assert (field.parent, other.parent) == (first, second)
            assert field.field_name == other.field_name == name
        built = serializer_class._fields_built
        assert all(getattr(field, "parent", None) is None for field, _ in built.values())
