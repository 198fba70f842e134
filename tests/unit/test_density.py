"""Density (issue 16 item 5): allocation per node pool and flavor, accelerators per team queued
or not, the last hour of usage from the event log, and the workloads table's columns."""

from __future__ import annotations

import re

import pytest
import yaml
from django.contrib.auth.models import User

from clusters import services as cluster_services
from clusters.catalog import V5E
from clusters.models import Cluster
from teams import services as teams
from tests.support import at, deployment, job
from web import density, panels
from workloads import admission, services
from workloads.models import KubeObject

V5E_FLAVOR = f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: v5e}}
spec: {{nodeLabels: {{cloud.google.com/gke-tpu-accelerator: {V5E}}}}}
"""


def tpu_server(name: str, chips: int) -> str:
    """A Deployment outside Kueue whose one pod holds `chips` v5e chips."""
    pod = {
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": V5E},
        "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "server",
                "image": "ghcr.io/example/server:1.0",
                "resources": {"requests": {"google.com/tpu": str(chips)}},
            }
        ],
    }
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
        },
    }
    return yaml.safe_dump(body)


@pytest.fixture
def world(gpu_queues, monkeypatch):
    """llm-cluster: 6 L4 GPUs (gpupool) and one 8-chip v5e host (pool v5e). Team llm: a queued
    Job (1 pod x 2 GPUs), an unqueued TPU server (8 chips), an unqueued GPU server (2 GPUs)
    deleted at minute 20, a Job that can never fit (pending). Team vision: an unqueued GPU
    server (2 GPUs). The pages are read at minute 30."""
    cluster = gpu_queues
    cluster_services.provision_now(
        cluster,
        name="v5e",
        machine_type="ct5lp-hightpu-8t",
        node_count=1,
        tpu_topology="2x4",
        at=at(),
    )
    teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
    teams.ensure_team("vision", namespaces=["vision"], members=[("bob", "submitter")])
    User.objects.create_user("root", is_staff=True)
    for text, namespace in (
        (V5E_FLAVOR, ""),
        (job("finetune", pods=1, gpus=2), "llm"),
        (job("huge", pods=4, gpus=2), "llm"),
        (tpu_server("tpu-serve", 8), "llm"),
        (deployment("extra", gpus=2, queue=None), "llm"),
        (deployment("serve", gpus=2, queue=None), "vision"),
    ):
        services.apply(cluster, text, source="w.yaml", now=at(), namespace=namespace or None)
    admission.advance(cluster, at(), at(minutes=5))
    extra = KubeObject.objects.get(name="extra")
    services.delete(extra, at(minutes=20))
    admission.advance(cluster, at(minutes=20), at(minutes=21))
    monkeypatch.setattr("django.utils.timezone.now", lambda: at(minutes=30))
    return cluster


def get(client, username, path, status=200):
    client.force_login(User.objects.get(username=username))
    response = client.get(path)
    assert response.status_code == status, response.content[:800]
    return response


def test_utilisation_per_node_pool_and_flavor_counts_every_bound_pod(world, client):
    """The unqueued servers count as much as the Job: 4 of 6 GPUs, 8 of 8 chips."""
    groups = density.utilisation(world)
    shown = {
        kind: {
            (g["name"], a["label"]): (a["used"], a["total"])
            for g in rows
            for a in g["accelerators"]
        }
        for kind, rows in groups.items()
    }
    assert shown == {
        "pools": {("gpupool", "GPUs"): (4, 6), ("v5e", "TPU chips"): (8, 8)},
        "flavors": {("l4", "GPUs"): (4, 6), ("v5e", "TPU chips"): (8, 8)},
    }
    html = get(client, "alice", "/clusters/llm-cluster/").content.decode()
    assert 'data-live="utilisation"' in html
    assert re.search(r'data-name="gpupool" data-resource="nvidia.com/gpu">.*?used-count">4<', html)
    assert re.search(r'data-name="v5e" data-resource="google.com/tpu">.*?used-count">8<', html)


def test_team_totals_count_pods_outside_kueue_and_hide_other_teams_names(world, client):
    assert density.team_usage(teams.scope_of(User.objects.get(username="root"))) == [
        {"team": "llm", "gpus": 2, "tpus": 8, "unqueued_gpus": 0, "unqueued_tpus": 8},
        {"team": "vision", "gpus": 2, "tpus": 0, "unqueued_gpus": 2, "unqueued_tpus": 0},
    ]
    html = get(client, "alice", "/").content.decode()
    assert re.search(r'data-team="llm">.*?gpus">2<.*?tpus">8<.*?8 TPU chips</td>', html, re.S)
    assert re.search(r'data-team="other teams">.*?gpus">2<', html, re.S)
    assert "vision" not in html.split('id="teams-title"')[1].split("</section>")[0]


def test_the_hour_chart_steps_through_binding_and_deletion(world, client):
    """Worked back from now (4 GPUs, 8 chips) through the `workload.pods` changes and the
    deletion's `object.deleted`: nothing before the pods bound, 6 GPUs until minute 20."""
    totals = {world.pk: panels.accelerator_totals(world)}
    chart = density.usage_history([world], at(minutes=30), totals)[world.pk]
    steps = {s["label"]: [(step.at, step.held) for step in s["steps"]] for s in chart["series"]}
    start = at(minutes=-30)
    assert steps == {
        "GPUs": [(start, 0), (at(), 6), (at(minutes=20), 4)],
        "TPU chips": [(start, 0), (at(), 8)],
    }
    html = get(client, "bob", "/").content.decode()
    assert html.count('class="usage-chart"') == 2
    assert "GPUs held, last hour: 4 now, peak 6 of 6" in html


def test_the_workloads_table_shows_priority_age_wait_and_accelerators(world, client):
    Cluster.objects.create(name="other", status=Cluster.Status.RUNNING)
    html = get(client, "alice", "/workloads/?cluster=llm-cluster").content.decode()
    rows = dict(re.findall(r'<tr data-key="llm-cluster:([^"]+)">(.*?)</tr>', html, re.S))
    assert set(rows) == {"Job/llm/finetune", "Job/llm/huge", "Deployment/llm/tpu-serve"}

    def cell(key: str, name: str) -> str:
        return re.search(rf'class="num {name}">(.*?)</td>', rows[key], re.S)[1].strip()

    assert cell("Job/llm/finetune", "priority") == "10"
    assert cell("Deployment/llm/tpu-serve", "priority") == "—"
    assert cell("Job/llm/finetune", "age") == "30m 00s"
    assert cell("Job/llm/finetune", "wait") == "0s"
    assert cell("Job/llm/huge", "wait") == "30m 00s so far"
    assert cell("Job/llm/finetune", "held") == "2 GPUs"
    assert cell("Deployment/llm/tpu-serve", "held") == "8 TPU chips"
    assert cell("Job/llm/huge", "held") == "—"
    assert "data-key=" not in get(client, "alice", "/workloads/?cluster=other").content.decode()


def test_a_cluster_filter_naming_no_cluster_is_a_400_saying_so(world, client):
    response = get(client, "alice", "/workloads/?cluster=nope", status=400)
    assert "cluster nope: there is none you may see" in response.content.decode()
    assert "data-key=" not in response.content.decode()
