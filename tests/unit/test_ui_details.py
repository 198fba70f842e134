"""The small things of the web UI: create links, quantities, times, Submit's namespaces, the
favicon, the way back from the API docs, and the checkpoint cadence read from a manifest."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.template import Context, Template
from django.utils import timezone

from clusters.models import Cluster
from events.models import Event
from tests.shared import GPU_SEED, GPU_SEED_FILES, GPU_SEED_PLACEHOLDERS, requires_shared
from tests.support import T0, deployment, job
from tests.unit import test_pages as pages
from tests.unit.test_pages import (
    CLUSTER,
    FINETUNE,
    INFERENCE,
    object_id,
    row_starting,
    table_rows,
)
from web.templatetags.display import human_quantity
from workloads import services
from workloads.manifests.training import checkpoint_steps
from workloads.models import KubeObject

# The demo, signed in as the platform admin or as ml-engineer of team llm.
demo, admin, member = pages.demo, pages.admin, pages.member
REPOSITORY = Path(__file__).resolve().parents[2]
KUEUE_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "PriorityClass")
# The TPU seed's ClusterQueue: 999999 chips and CPUs and 999999Pi of memory mean "no limit".
NO_LIMIT_QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: slice-rf}
spec: {nodeLabels: {cloud.google.com/gke-tpu-accelerator: tpu7x}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [google.com/tpu, cpu, memory]
    flavors:
    - name: slice-rf
      resources:
      - {name: google.com/tpu, nominalQuota: "999999"}
      - {name: cpu, nominalQuota: "999999"}
      - {name: memory, nominalQuota: "999999Pi"}
"""
TIME_TEXT = re.compile(r"<time datetime=\"[^\"]+\" title=\"[^\"]+ UTC\">([^<]*)</time>")
CLOCK = r"\d\d:\d\d:\d\d"


def test_platform_page_names_every_kueue_kind_it_links_to(admin):
    text = admin.get("/platform/").content.decode()

    for kind in KUEUE_KINDS:
        slug = kind.lower()
        link = f'<a href="/platform/kueue/{slug}/new/?cluster={CLUSTER}">{kind}</a>'
        assert link in text
    assert "></a>" not in text


@pytest.mark.parametrize(
    ("resource", "value", "shown"),
    [
        ("memory", "288Gi", "288Gi"),
        ("memory", "1536Mi", "1.5Gi"),
        ("memory", "1.2345Gi", "1.23Gi"),
        ("memory", "999999Pi", "unlimited"),
        ("memory", "1048574937824Gi", "unlimited"),
        ("memory", "800Pi", "800Pi"),
        ("memory", "1023.9Mi", "1Gi"),
        ("cpu", "500m", "0.5"),
        ("cpu", "72", "72"),
        ("nvidia.com/gpu", "6", "6"),
        ("cpu", "12345", "12.3k"),
        ("google.com/tpu", "999999", "1M"),
        ("cpu", None, "—"),
    ],
)
def test_quantities_are_shown_with_three_significant_digits_at_most(resource, value, shown):
    assert human_quantity(resource, value) == shown


def test_queue_page_shows_no_limit_quotas_readably(admin):
    tpu = Cluster.objects.create(name="tpu-cluster", status=Cluster.Status.RUNNING)
    services.apply(tpu, NO_LIMIT_QUEUES, source="queues.yaml", now=timezone.now())

    response = admin.get("/queues/?cluster=tpu-cluster")
    rows = table_rows(response)

    # Flavor, resource, nominal, used, borrowed, lendable, pending.
    assert row_starting(rows, "slice-rf", "memory")[2:7] == [
        "unlimited",
        "0",
        "0",
        "unlimited",
        "0",
    ]
    assert row_starting(rows, "slice-rf", "google.com/tpu")[2:7] == ["1M", "0", "0", "1M", "0"]
    text = response.content.decode()
    assert "e+" not in text
    assert not re.search(r"\d{5,}", text.split("<main", 1)[1])


def test_demo_queue_page_keeps_exact_quotas(admin):
    rows = table_rows(admin.get("/queues/"))

    assert row_starting(rows, "l4", "memory")[2] == "288Gi"
    assert row_starting(rows, "l4", "nvidia.com/gpu")[2:4] == ["6", "6"]


def _clock_texts(html):
    return TIME_TEXT.findall(html)


def test_clock_shows_todays_times_as_hh_mm_ss_and_older_ones_with_their_date():
    template = Template("{% load display %}{{ when|clock }}")
    today = timezone.now().replace(hour=9, minute=5, second=7, microsecond=0)
    old = today - timedelta(days=3)

    assert _clock_texts(template.render(Context({"when": today}))) == ["09:05:07"]
    assert _clock_texts(template.render(Context({"when": old.isoformat()}))) == [
        old.strftime("%Y-%m-%d 09:05:07")
    ]


def test_every_time_on_the_pages_has_one_format(admin):
    admin.post(f"/workloads/{object_id(INFERENCE)}/", {"replicas": 2})  # preempts the fine-tune
    old = Event.objects.order_by("id").first()
    Event.objects.filter(pk=old.pk).update(at=old.at - timedelta(days=2))

    overview = admin.get("/").content.decode()
    fine_tune = admin.get(f"/workloads/{object_id(FINETUNE)}/").content.decode()

    shown = _clock_texts(overview) + _clock_texts(fine_tune)
    assert shown
    assert all(re.fullmatch(rf"(\d{{4}}-\d\d-\d\d )?{CLOCK}", text) for text in shown)
    assert any(text.startswith(str(old.at.year)) for text in _clock_texts(overview))
    assert re.search(rf"Last preempted <time [^>]+>{CLOCK}</time>", fine_tune)
    assert "T" not in "".join(shown)


def test_admins_can_submit_to_default_and_to_namespaces_with_local_queues(admin):
    services.apply(
        Cluster.objects.get(),
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n"
        "metadata: {name: lq, namespace: serving}\nspec: {clusterQueue: gpu-shared}\n",
        source="lq.yaml",
        now=timezone.now(),
    )
    page = admin.get("/submit/").content.decode()
    for namespace in ("default", "llm", "serving"):
        assert f'<option value="{namespace}"' in page
    assert "<code>serving/lq</code>" in page

    response = admin.post(
        "/submit/",
        {
            "cluster": CLUSTER,
            "namespace": "default",
            "manifest": deployment("web", queue=None),
            "action": "apply",
        },
        HTTP_HOST="127.0.0.1",
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert KubeObject.objects.filter(namespace="default", name="web").exists()


def test_a_team_member_submits_only_to_their_namespace_and_sees_its_queues(member):
    page = member.get("/submit/").content.decode()

    assert re.findall(r'<option value="([^"]+)"', page.split('name="namespace"')[1])[:2] == ["llm"]
    assert 'value="default"' not in page
    assert "<code>llm/team-llm</code> in demo-gpu-cluster" in page
    assert "CHECKPOINT_SAVE_STEPS" in page


def test_favicon_is_served_and_linked_by_every_page(admin, client):
    response = client.get("/favicon.ico")

    assert response.status_code == 301
    assert response.url == "/static/favicon.svg"
    assert finders.find("favicon.svg")
    assert '<link rel="icon" href="/static/favicon.svg"' in admin.get("/").content.decode()


def test_api_docs_link_back_to_the_app(admin):
    text = admin.get("/api/docs/").content.decode()

    assert '<a href="/">← Accelplane</a>' in text
    assert 'id="swagger-ui"' in text


# The checkpoint cadence the simulator follows.


def _container(**extra):
    return {"spec": {"template": {"spec": {"containers": [{"name": "t", **extra}]}}}}


@pytest.mark.parametrize(
    ("container", "steps"),
    [
        ({"env": [{"name": "CHECKPOINT_SAVE_STEPS", "value": "10"}]}, 10),
        ({"env": [{"name": "SAVE_STEPS", "value": "7"}]}, 7),
        ({"args": ["--save_steps", "25"]}, 25),
        ({"args": ["--save_steps=40"]}, 40),
        ({"command": ["bash", "-c", "python train.py --save-steps 15 --lr 1e-4"]}, 15),
        ({"args": ["--save_steps", "0.1"]}, None),
        ({"env": [{"name": "CHECKPOINT_SAVE_STEPS", "value": "$(STEPS)"}]}, None),
        ({"env": [{"name": "CHECKPOINT_SAVE_STEPS", "valueFrom": {"secretKeyRef": {}}}]}, None),
        ({"args": ["--save_steps=5"], "env": [{"name": "SAVE_STEPS", "value": "9"}]}, 5),
        ({}, None),
    ],
)
def test_checkpoint_steps_are_read_where_training_code_reads_them(container, steps):
    assert checkpoint_steps(_container(**container)) == steps


def _job_with(env_steps=None, annotation=30):
    body = yaml.safe_load(job(checkpoint_every=annotation))
    if env_steps is not None:
        containers = body["spec"]["template"]["spec"]["containers"]
        containers[0]["env"] = [{"name": "CHECKPOINT_SAVE_STEPS", "value": str(env_steps)}]
    return yaml.safe_dump(body)


def _cadence():
    return KubeObject.objects.get(kind="Job").simulation["checkpoint_every"]


def test_the_manifests_cadence_wins_over_the_annotation(gpu_queues):
    services.apply(gpu_queues, _job_with(env_steps=10), source="j.yaml", now=T0, namespace="llm")
    assert _cadence() == 10


def test_without_one_in_the_manifest_the_annotation_counts(gpu_queues):
    services.apply(gpu_queues, _job_with(), source="j.yaml", now=T0, namespace="llm")
    assert _cadence() == 30


def test_a_scenario_entry_wins_over_the_manifest(gpu_queues):
    services.apply(
        gpu_queues,
        _job_with(env_steps=10),
        source="j.yaml",
        now=T0,
        namespace="llm",
        simulation={"Job/llm/finetune": {"checkpointEvery": 4}},
    )
    assert _cadence() == 4


@requires_shared
def test_the_seed_fine_tune_checkpoints_every_ten_steps_as_it_says(gpu_queues):
    def seed(name):
        text = (GPU_SEED / name).read_text()
        for placeholder, value in GPU_SEED_PLACEHOLDERS.items():
            text = text.replace(placeholder, value)
        return text

    queues = "---\n".join(seed(name) for name in GPU_SEED_FILES)
    services.apply(gpu_queues, queues, source="seed", now=T0, namespace="llm")
    services.apply(gpu_queues, seed("fine-tune-l4.yaml"), source="seed", now=T0, namespace="llm")

    assert _cadence() == 10


def test_the_example_job_is_a_team_llm_fine_tune_that_sets_its_cadence():
    body = yaml.safe_load((REPOSITORY / "examples" / "job.yaml").read_text())

    assert body["metadata"]["namespace"] == "llm"
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-llm"
    assert checkpoint_steps(body) == 20
