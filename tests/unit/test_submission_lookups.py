"""What a submission reads of what exists, on SQLite and on PostgreSQL (DATABASE_URL): its
objects by name, whatever their namespace or kind, and the priority classes of both kinds."""

from __future__ import annotations

import yaml

from tests.support import NAMESPACE, at, job
from workloads import services
from workloads.models import KubeObject, Workload

CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: finetune}\ndata: {a: b}\n"


def _apply(cluster, text, namespace=NAMESPACE):
    return services.apply(
        cluster, text, source="s.yaml", now=at(), namespace=namespace, admit=services.Admit.SKIP
    )


def test_an_object_is_found_among_namesakes_of_other_namespaces_and_kinds(gpu_queues):
    _apply(gpu_queues, CONFIG_MAP)
    _apply(gpu_queues, job(), namespace="elsewhere")
    (created,) = _apply(gpu_queues, job())

    (again,) = _apply(gpu_queues, job())

    assert (created.action, again.action) == ("created", "unchanged")
    assert again.pk == created.pk
    assert KubeObject.objects.filter(name="finetune").count() == 3


def _without_priority(name, **labels):
    body = yaml.safe_load(job(name))
    del body["spec"]["template"]["spec"]["priorityClassName"]
    body["metadata"]["labels"].update(labels)
    return yaml.safe_dump(body)


def test_priorities_of_both_kinds_and_the_global_default(gpu_queues):
    # Namesakes of both kinds, and a global default (a false one beside it).
    _apply(
        gpu_queues,
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: fallback}\n"
        "value: 7\nglobalDefault: true\n---\n"
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: other}\n"
        "value: 1\nglobalDefault: false\n---\n"
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\n"
        "metadata: {name: fallback}\nvalue: 3\n",
        namespace=None,
    )

    _apply(gpu_queues, _without_priority("plain"))
    _apply(
        gpu_queues, _without_priority("classed", **{"kueue.x-k8s.io/priority-class": "fallback"})
    )

    priorities = dict(Workload.objects.values_list("owner__name", "priority"))
    assert priorities == {"plain": 7, "classed": 3}


def test_a_class_applied_beside_a_workload_that_uses_it_and_one_that_exists(gpu_queues):
    """The request reads its objects and the classes in one statement, before its own class
    exists: the class it applies is read again before the workload that names it."""
    (old,) = _apply(gpu_queues, job("old"))
    urgent = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\n"
        "metadata: {name: urgent}\nvalue: 50\n"
    )
    fresh = _without_priority("fresh", **{"kueue.x-k8s.io/priority-class": "urgent"})

    applied = _apply(gpu_queues, "---\n".join([job("old"), urgent, fresh]))

    assert [(a.key, a.action) for a in applied] == [
        (f"Job/{NAMESPACE}/old", "unchanged"),
        ("WorkloadPriorityClass/urgent", "created"),
        (f"Job/{NAMESPACE}/fresh", "created"),
    ]
    assert applied[0].pk == old.pk
    assert Workload.objects.get(owner__name="fresh").priority == 50
