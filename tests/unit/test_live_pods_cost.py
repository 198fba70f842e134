"""The cheap reads of a round's end and start say what the database's own aggregates say:
`live.report_pods`'s pod counts per owner, and `runtime._due`'s "a PodsReady flag flips"."""

from __future__ import annotations

import pytest
import yaml
from django.db.models import Count, IntegerField, Max, Q, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from clusters.models import Cluster
from tests.support import GPU_QUEUES, NAMESPACE, T0, at, deployment, job
from workloads import admission, live, runtime, services
from workloads.models import KubeObject, Pod, Workload
from workloads.status import WORKLOAD_KINDS


def apply(cluster, text, now):
    return services.apply(cluster, text, source="w.yaml", now=now, namespace=NAMESPACE)


def aggregated(cluster, owner_ids):
    """The counts as the database adds them up (what `live._owners` replaced)."""
    owners = KubeObject.objects.filter(cluster=cluster, kind__in=WORKLOAD_KINDS)
    if owner_ids is not None:
        owners = owners.filter(pk__in=owner_ids)
    keys = {
        pk: (f"{kind}/{ns}/{name}", ns)
        for pk, kind, ns, name in owners.values_list("pk", "kind", "namespace", "name")
    }
    on_node = Q(node__isnull=False, phase__in=live.HOLDING_NODE)

    def held(resource):
        return Sum(Cast(KT(f"scheduling__requests__{resource}"), IntegerField()), filter=on_node)

    rows = (
        Pod.objects.filter(owner_id__in=keys)
        .order_by()
        .values("owner_id")
        .annotate(
            pods=Count("pk"),
            bound=Count("pk", filter=on_node),
            running=Count("pk", filter=on_node & Q(phase=Pod.Phase.RUNNING, ready=True)),
            ready=Count("pk", filter=Q(ready=True)),
            workloads=Count("workload", distinct=True),
            workload=Max("workload__name"),
            **{name: held(resource) for name, resource in live.HELD.items()},
        )
    )
    counts = {pk: dict(live.NO_PODS) for pk in keys}
    for row in rows:
        counts[row["owner_id"]] = {
            **{name: row[name] for name in ("pods", "bound", "running", "ready")},
            **{name: (row[name] or 0) // 1000 for name in live.HELD},
            "workload": row["workload"] if row["workloads"] == 1 else "",
        }
    return {pk: (*keys[pk], counts[pk]) for pk in keys}


def assert_counts_agree(cluster):
    every = [*KubeObject.objects.values_list("pk", flat=True), 10**9]  # and one that is gone
    assert live._owners(cluster, every) == aggregated(cluster, every)
    assert live._owners(cluster, None) == aggregated(cluster, None)
    for pk in every:
        assert live._owners(cluster, [pk]) == aggregated(cluster, [pk])


def test_pod_counts_per_owner_are_the_databases_aggregates(gpu_queues):
    apply(gpu_queues, job(pods=2, gpus=1, startup="60s"), at())
    # One workload per pod: the owner names none.
    apply(gpu_queues, deployment(replicas=2, gpus=1, startup="30s"), at())
    web = yaml.safe_load(deployment("web", replicas=3, gpus=0, queue=None))
    apply(gpu_queues, yaml.safe_dump(web), at())
    apply(gpu_queues, job("waits", pods=4, gpus=2), at())  # no room: no pods bound
    # Another cluster's owner, and a kind without pods of its own, are not counted.
    other = Cluster.objects.create(name="other", status=Cluster.Status.RUNNING)
    services.apply(other, GPU_QUEUES, source="queues.yaml", now=T0)
    apply(other, job("elsewhere"), at())
    services.apply(
        gpu_queues,
        "apiVersion: v1\nkind: Service\nmetadata: {name: svc}\nspec: {ports: [{port: 80}]}\n",
        source="s.yaml",
        now=at(),
        namespace=NAMESPACE,
    )
    assert_counts_agree(gpu_queues)
    for seconds in (0, 30, 60, 90):
        admission.advance(gpu_queues, at(seconds=seconds), at(seconds=seconds))
        assert_counts_agree(gpu_queues)
    owners = {key: counts for key, _, counts in live._owners(gpu_queues, None).values()}
    assert owners["Job/llm/finetune"]["gpus"] == 2
    assert owners["Job/llm/finetune"]["workload"].startswith("job-finetune-")
    assert owners["Deployment/llm/inference"]["workload"] == ""  # a workload per pod
    assert owners["Deployment/llm/web"]["running"] == 3
    assert "Service/llm/svc" not in owners
    # A pod without a workload beside ones with one; one not ready on its node.
    pod = Pod.objects.filter(owner__name="finetune").first()
    Pod.objects.filter(pk=pod.pk).update(workload=None)
    Pod.objects.filter(owner__name="web").update(ready=False)
    assert_counts_agree(gpu_queues)
    Pod.objects.filter(owner__name="finetune").update(workload=None)
    assert_counts_agree(gpu_queues)


@pytest.mark.parametrize("flag", [False, True])
@pytest.mark.parametrize("pods", ["none", "all ready", "one not ready"])
def test_due_says_a_pods_ready_flag_flips_exactly_when_it_does(gpu_queues, flag, pods):
    apply(gpu_queues, job(pods=2, gpus=1, startup="60s"), at())
    admission.advance(gpu_queues, at(), at(minutes=2))
    (row,) = Workload.objects.filter(phase=Workload.Phase.ADMITTED)
    if pods == "none":
        row.pods.all().delete()
    else:
        row.pods.update(ready=True)
        if pods == "one not ready":
            Pod.objects.filter(pk=row.pods.first().pk).update(ready=False)
    Workload.objects.filter(pk=row.pk).update(pods_ready=flag)

    flips = flag != (pods == "all ready")
    assert runtime._due(gpu_queues, at(minutes=3)).flipping is flips
    assert runtime._track_pods_ready(gpu_queues, at(minutes=3)) is flips
    assert runtime._due(gpu_queues, at(minutes=3)).flipping is False
