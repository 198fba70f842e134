"""The README's curl examples, read from the README and sent as written, on the demo of a fresh
`make run`, then again once a second cluster exists."""

from __future__ import annotations

import re
import shlex
from io import StringIO
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.utils import timezone

from clusters.models import Cluster
from tests.support import row_counts
from workloads import services
from workloads.models import KubeObject

# The README names the demo's objects by id (`/workloads/1/scale`), as a fresh database numbers
# them: PostgreSQL's sequences are reset for these tests.
pytestmark = pytest.mark.django_db(transaction=True, reset_sequences=True)

REPOSITORY = Path(__file__).resolve().parents[2]
GPU_CLUSTER = "demo-gpu-cluster"
# A second cluster as docs/take-screenshots.sh makes one: its own queue for team llm.
TPU_QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: tpu7x}
spec: {nodeLabels: {cloud.google.com/gke-tpu-accelerator: tpu7x}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: tpu-shared}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [google.com/tpu]
    flavors:
    - name: tpu7x
      resources: [{name: google.com/tpu, nominalQuota: "192"}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: tpu, namespace: llm}
spec: {clusterQueue: tpu-shared}
"""


def readme_requests():
    """(method, path, headers, body) of every curl line of the README's REST API block."""
    readme = (REPOSITORY / "README.md").read_text()
    block = readme.split("## The REST API", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    assignments = dict(re.findall(r"(\w+)=(\"[^\"]*\"|[^;\s]+)", "\n".join(lines[:2])))
    api = assignments["API"]
    auth = assignments["AUTH"].strip('"')
    return api, auth, [line for line in lines if line.lstrip().startswith("curl ")]


def parse_curl(line, variables):
    for name, value in variables.items():
        line = line.replace(f"${name}", value)
    words = shlex.split(line, comments=True)[1:]
    headers, body, url = {}, None, None
    while words:
        word = words.pop(0)
        if word == "-H":
            name, _, value = words.pop(0).partition(": ")
            headers[name] = value
        elif word in ("-d", "--data-binary"):
            body = words.pop(0)
            if body.startswith("@"):
                body = (REPOSITORY / body[1:]).read_text()
        elif not word.startswith("-"):
            url = word
    return ("POST" if body is not None else "GET"), url, headers, body


@pytest.fixture
def fresh_make_run(db, tmp_path, settings):
    """`manage.py demo` as `make run` runs it; its token file in var/, as the README reads it."""
    settings.VAR_DIR = tmp_path / "var"
    call_command("demo", stdout=StringIO())
    return (settings.VAR_DIR / "llm-token").read_text().strip()


def run_readme(client, token):
    api, auth, lines = readme_requests()
    variables = {"TOKEN": token, "API": api, "AUTH": auth.replace("$TOKEN", token)}
    answers = []
    for line in lines:
        method, url, headers, body = parse_curl(line, variables)
        parts = urlsplit(url)
        path = f"{parts.path}?{parts.query}" if parts.query else parts.path
        response = client.generic(
            method,
            path,
            body or "",
            content_type=headers.get("Content-Type", "application/octet-stream"),
            HTTP_AUTHORIZATION=headers["Authorization"],
        )
        answers.append((line, response))
    return answers


def assert_all_answered(answers):
    assert len(answers) == 6
    for line, response in answers:
        assert response.status_code in (200, 201), (line, response.content[:500])


def test_the_readme_examples_run_on_a_fresh_make_run(fresh_make_run, client):
    answers = run_readme(client, fresh_make_run)

    assert_all_answered(answers)
    whatif = answers[4][1].json()
    assert [w["workload"]["owner"] for w in whatif["workloads"]] == ["sql-finetune-small"]


def test_the_readme_examples_run_once_a_second_cluster_exists(fresh_make_run, client):
    tpu = Cluster.objects.create(name="demo-tpu-cluster", status=Cluster.Status.RUNNING)
    services.apply(tpu, TPU_QUEUES, source="tpu.yaml", now=timezone.now())

    answers = run_readme(client, fresh_make_run)

    assert_all_answered(answers)
    submitted = answers[0][1].json()["objects"]
    assert {o["cluster"] for o in submitted} == {GPU_CLUSTER}
    assert not KubeObject.objects.filter(cluster=tpu).exists()


def test_without_cluster_a_queue_several_clusters_hold_is_refused_naming_them(
    fresh_make_run, client
):
    other = Cluster.objects.create(name="second-gpu-cluster", status=Cluster.Status.RUNNING)
    services.apply(
        other,
        TPU_QUEUES.replace("name: tpu, namespace", "name: team-llm, namespace"),
        source="q.yaml",
        now=timezone.now(),
    )
    before = row_counts()

    response = client.post(
        "/api/v1/whatif",
        (REPOSITORY / "examples" / "job.yaml").read_text(),
        content_type="application/yaml",
        HTTP_AUTHORIZATION=f"Bearer {fresh_make_run}",
    )

    assert response.status_code == 400
    (message,) = response.json()["cluster"]
    assert "llm/team-llm" in message
    assert "demo-gpu-cluster, second-gpu-cluster" in message
    assert "?cluster=NAME" in message
    assert row_counts() == before
