"""Hostile input meets a bound (issue 13, findings 1 to 4): pod counts, YAML alias bombs,
nesting, huge and non-finite numbers, names, documents, body sizes and encodings. Each is a 4xx
whose JSON body names the field or the limit, and nothing of the request is stored, on
/api/v1/workloads, /api/v1/whatif, scale, the web pages and scenario replay alike."""

# ruff: noqa: F811  (the API tests' fixtures, imported, are the tests' arguments)
from __future__ import annotations

import json

import pytest
import yaml
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from api.consumers import EventsConsumer
from tests.api.conftest import admin, alice, tenants  # noqa: F401 (fixtures)
from tests.api.test_workloads import post_manifests
from tests.conformance.test_replay import replay_json
from tests.support import deployment, job, row_counts
from workloads.models import ClusterQueue, KubeObject, Workload

pytestmark = pytest.mark.django_db

ENDPOINTS = ["/api/v1/workloads", "/api/v1/whatif"]
INT64_MAX = 2**63 - 1


def stored():
    """Every table but the event log (a refusal records its own `workload.rejected`)."""
    counts = row_counts()
    counts.pop("events.Event")
    return counts


def strict_json(response):
    """The body as a strict JSON parser reads it: NaN or Infinity in it would fail here."""

    def refuse(constant):
        raise AssertionError(f"{constant} in the response body is not JSON")

    return json.loads(response.content, parse_constant=refuse)


def assert_refused(response, before, *, names, status=400):
    assert response.status_code == status, response.content
    body = strict_json(response)
    assert names in json.dumps(body, ensure_ascii=False), body
    assert stored() == before


def post(client, text, path="/api/v1/workloads", content_type="application/yaml"):
    return post_manifests(client, text, path=path, content_type=content_type, namespace="llm")


def job_body(**changes):
    """A Job (as a dict) of one cheap pod: 1m cpu and 1Mi, no GPU."""
    body = yaml.safe_load(job(gpus=0))
    container = body["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "1m", "memory": "1Mi"}}
    body["spec"].update(changes)
    return body


def lws(replicas=1, size=2):
    return f"""\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {{name: lws, labels: {{kueue.x-k8s.io/queue-name: team-llm}}}}
spec:
  replicas: {replicas}
  leaderWorkerTemplate:
    size: {size}
    workerTemplate:
      spec:
        containers: [{{name: c, image: i, resources: {{requests: {{cpu: 1m}}}}}}]
"""


def jobset(replicas):
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "labels": {"kueue.x-k8s.io/queue-name": "team-llm"}},
        "spec": {
            "replicatedJobs": [
                {"name": "w", "replicas": replicas, "template": {"spec": job_body()["spec"]}}
            ]
        },
    }
    return yaml.safe_dump(body)


# Finding 1: pods and replicas.


@pytest.mark.parametrize("path", ENDPOINTS)
def test_a_job_of_two_billion_pods_is_refused_naming_its_parallelism(alice, path):
    body = job_body(parallelism=2**31 - 1, completions=2**31 - 1, completionMode="NonIndexed")
    before = stored()
    response = post(alice, yaml.safe_dump(body), path)
    assert_refused(response, before, names="spec.parallelism")
    assert "at most 10000" in response.json()["detail"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"parallelism": 100_001, "completions": 100_001}, "spec.parallelism"),
        ({"parallelism": 2, "completions": 100_001}, "spec.completions"),
    ],
)
def test_indexed_jobs_have_kubernetes_limit_of_100000(alice, changes, field):
    before = stored()
    response = post(alice, yaml.safe_dump(job_body(**changes)))
    assert_refused(response, before, names=field)
    assert "at most 100000" in response.json()["detail"]


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        (deployment(replicas=10_001), "spec.replicas"),
        (lws(replicas=10_001), "spec.replicas"),
        (lws(replicas=2_000, size=6), "spec.replicas"),
        (lws(size=2**31 - 1), "spec.leaderWorkerTemplate.size"),
        (jobset(replicas=10_001), "spec.replicatedJobs[0].replicas"),
    ],
    ids=["deployment", "lws-replicas", "lws-pods", "lws-size", "jobset-replicas"],
)
@pytest.mark.parametrize("path", ENDPOINTS)
def test_replicas_and_groups_past_the_limits_are_refused(alice, manifest, field, path):
    before = stored()
    assert_refused(post(alice, manifest, path), before, names=field)


def test_a_request_of_too_many_pods_in_all_is_refused_naming_the_document(alice):
    jobs = [job_body(parallelism=8_000, completions=8_000) for _ in range(3)]
    for i, body in enumerate(jobs):
        body["metadata"]["name"] = f"part-{i}"
    before = stored()
    response = post(alice, yaml.safe_dump_all(jobs))
    assert_refused(response, before, names="24000 pods")
    assert response.json()["document"] == 3


@pytest.fixture
def inference(alice):
    created = post(alice, deployment(replicas=1))
    assert created.status_code == 201, created.json()
    return created.json()["objects"][0]["id"]


@pytest.mark.parametrize("replicas", [10_001, 2**31, 10**30])
def test_scaling_past_the_replica_limit_is_refused_and_changes_nothing(alice, inference, replicas):
    before = stored()
    response = alice.post(
        f"/api/v1/workloads/{inference}/scale", {"replicas": replicas}, format="json"
    )
    assert_refused(response, before, names="spec.replicas")
    assert KubeObject.objects.get(pk=inference).manifest["spec"]["replicas"] == 1


def test_scaling_a_leader_worker_set_past_the_pod_limit_is_refused(alice, settings):
    settings.ACCELPLANE_MAX_PODS_PER_OBJECT = 10
    created = post(alice, lws(replicas=1, size=4))
    assert created.status_code == 201, created.json()
    pk = created.json()["objects"][0]["id"]
    before = stored()
    response = alice.post(f"/api/v1/workloads/{pk}/scale", {"replicas": 3}, format="json")
    assert_refused(response, before, names="makes 12 pods")


def test_scaling_on_the_workload_page_has_the_same_limit(alice, inference):
    browser = Client()
    browser.force_login(User.objects.get(username="alice"))
    before = stored()
    response = browser.post(f"/workloads/{inference}/", {"replicas": 10_001})
    assert response.status_code == 400
    assert "spec.replicas" in response.content.decode()
    assert stored() == before


def test_scenario_replay_has_the_same_limits(tmp_path):
    huge = job_body(parallelism=2**31 - 1, completions=2**31 - 1, completionMode="NonIndexed")
    manifest = yaml.safe_dump(huge)
    scenario = {
        "name": "huge",
        "cluster": {
            "name": "c",
            "nodePools": [{"name": "p", "machineType": "n2-standard-8", "nodes": 1}],
        },
        "steps": [{"apply": {"manifest": manifest}, "namespace": "llm", "expectRejected": True}],
    }
    path = tmp_path / "huge.yaml"
    path.write_text(yaml.safe_dump(scenario))
    (report,) = replay_json(path)
    assert report["ok"] is True, report
    assert "spec.parallelism" in report["steps"][0]["error"]
    assert report["steps"][0]["objects"] == {}


# Finding 2: YAML alias bombs, nesting.


def laughs(levels, fanout=9):
    """The billion laughs: level i is `fanout` aliases of level i - 1."""
    lines = ['  l0: &l0 "lol"']
    for i in range(1, levels + 1):
        lines.append(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fanout)}]")
    return "\n".join(lines)


def merges(levels, fanout=9):
    """The same with `<<` merge keys, which PyYAML expands into each mapping's node list."""
    lines = ["  m0: &m0 {a: 1, b: 2}"]
    for i in range(1, levels + 1):
        lines.append(f"  m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * fanout)}], k{i}: 1}}")
    return "\n".join(lines)


BOMBS = {
    "laughs-9-levels": (laughs(9), "expand to more than"),
    "laughs-6-levels": (laughs(6), "expand to more than"),
    "merge-keys": (merges(8), "expand to more than"),
    "recursive-alias": ("  loop: &loop [1, *loop]", "refers to a node that contains it"),
    "recursive-merge": ("  loop: &loop {a: 1, <<: *loop}", "refers to a node that contains it"),
    "many-aliases": (
        "  one: &one x\n  many: [" + ", ".join(["*one"] * 101) + "]",
        "more than 100 YAML aliases",
    ),
    "deep-block": (
        "".join("\n" + "  " * (i + 1) + f"k{i}:" for i in range(70)) + " 1",
        "nested deeper than 64 levels",
    ),
    "deep-flow": ("  deep: " + "[" * 70 + "]" * 70, "nested deeper than 64 levels"),
    "deep-alias": (
        "  a: &a " + "[" * 40 + "]" * 40 + "\n  b: " + "[" * 30 + "*a" + "]" * 30,
        "nested deeper than 64 levels",
    ),
}


@pytest.mark.parametrize("shape", BOMBS)
@pytest.mark.parametrize("path", ENDPOINTS)
def test_yaml_bombs_are_refused_before_they_expand(alice, shape, path):
    bomb, problem = BOMBS[shape]
    before = stored()
    response = post(alice, job() + "x-payload:" + ("\n" if bomb.startswith("  ") else "") + bomb)
    assert_refused(response, before, names=problem)
    assert response.json()["document"] == 1


def test_a_small_use_of_anchors_is_still_applied(alice):
    text = job() + "x-defaults: &defaults {team: llm}\nx-copy: {<<: *defaults, more: 1}\n"
    assert post(alice, text).status_code == 201


def test_aliases_count_per_request_across_documents(alice, settings):
    settings.ACCELPLANE_MAX_EXPANDED_MANIFEST_BYTES = 20_000
    payload = "x-payload:\n" + laughs(3, fanout=5) + "\n"  # 125 * 7 bytes, cheap alone
    docs = [job(name=f"j{i}") + payload for i in range(30)]
    before = stored()
    response = post(alice, "---\n".join(docs))
    assert_refused(response, before, names="expand to more than 20000 bytes")


@pytest.mark.parametrize(
    "body",
    [
        '{"apiVersion": "batch/v1", "kind": "Job", "x": ' + "[" * 70 + "]" * 70 + "}",
        "[" * 100_000 + "]" * 100_000,
        '{"a":' * 100_000 + "1" + "}" * 100_000,
    ],
    ids=["70-deep", "100000-deep-list", "100000-deep-object"],
)
@pytest.mark.parametrize("path", ENDPOINTS)
def test_deeply_nested_json_manifests_are_refused(alice, body, path):
    before = stored()
    response = post(alice, body, path, content_type="application/json")
    assert_refused(response, before, names="nested deeper than 64 levels")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/workloads/{pk}/scale", "[" * 100_000 + "]" * 100_000),
        ("/api/v1/workloads/{pk}/scale", '{"replicas": ' + "[" * 70 + "]" * 70 + "}"),
        ("/api/v1/tokens", '{"a":' * 100_000 + "1" + "}" * 100_000),
    ],
)
def test_deeply_nested_json_bodies_are_refused_on_every_endpoint(alice, inference, path, body):
    before = stored()
    response = alice.post(path.format(pk=inference), body, content_type="application/json")
    assert_refused(response, before, names="nested deeper than 64 levels")


# Findings 3 and 4: quantities and numbers.


@pytest.mark.parametrize(
    ("resource", "value", "content_type"),
    [
        ("nvidia.com/gpu", 1e308, "application/yaml"),
        ("nvidia.com/gpu", "1e308", "application/yaml"),
        ("cpu", "1e10000000", "application/yaml"),
        ("cpu", "9223372036854775808", "application/yaml"),
        ("cpu", "1" + "0" * 50 + "E", "application/json"),
    ],
)
@pytest.mark.parametrize("path", ENDPOINTS)
def test_quantities_nothing_could_count_are_refused(alice, resource, value, content_type, path):
    body = job_body()
    body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][resource] = value
    text = json.dumps(body) if content_type == "application/json" else yaml.safe_dump(body)
    before = stored()
    response = post(alice, text, path, content_type=content_type)
    assert_refused(response, before, names=f"requests[{resource}]" if "/" in resource else "cpu")
    assert "is too large" in response.json()["detail"]


def test_binary_quantities_past_int64_are_capped_as_kubernetes_does(alice):
    """apimachinery caps `999999999999999999999Ti` at 2^63-1 bytes: accepted, then counted so."""
    body = job_body()
    body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = (
        "999999999999999999999Ti"
    )
    assert post(alice, yaml.safe_dump(body)).status_code == 201
    (workload,) = Workload.objects.all()
    assert workload.pod_sets[0]["requests"]["memory"] == INT64_MAX * 1000


@pytest.mark.parametrize("field", ["nominalQuota", "borrowingLimit", "lendingLimit"])
def test_cluster_queue_quotas_nothing_could_count_are_refused(admin, field):
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "huge"},
        "spec": {
            "cohortName": "all",
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "l4",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1}],
                        }
                    ],
                }
            ],
        },
    }
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0][field] = "1e308"
    before = stored()
    response = post(admin, yaml.safe_dump(queue))
    assert_refused(response, before, names=field)
    assert not ClusterQueue.objects.filter(name="huge").exists()


NON_FINITE = [
    ("yaml", "cpu: .inf", "requests.cpu"),
    ("yaml", "cpu: -.inf", "requests.cpu"),
    ("yaml", "cpu: .nan", "requests.cpu"),
    ("yaml", "replicas: .nan", "spec.replicas"),
    ("yaml", "x: 1.0e+400", "x-free.x"),
    ("json", '"cpu": NaN', "requests.cpu"),
    ("json", '"cpu": Infinity', "requests.cpu"),
    ("json", '"cpu": 1e5000', "requests.cpu"),
    ("json", '"x": -Infinity', "x-free.x"),
]


@pytest.mark.parametrize(("syntax", "item", "field"), NON_FINITE)
@pytest.mark.parametrize("path", ENDPOINTS)
def test_non_finite_numbers_are_refused_with_a_valid_json_body(alice, syntax, item, field, path):
    key, _, value = item.partition(": ")
    key = key.strip('"')
    if key == "replicas":
        text = deployment().replace("replicas: 1", item)
        syntax = "yaml"
    elif syntax == "yaml":
        body = job_body()
        if key == "cpu":
            body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = 0
        else:
            body["x-free"] = {key: 0}
        text = yaml.safe_dump(body).replace(f"{key}: 0", item)
    else:
        body = job_body()
        if key == "cpu":
            body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = 0
        else:
            body["x-free"] = {key: 0}
        text = json.dumps(body).replace(f'"{key}": 0', f'"{key}": {value}')
    before = stored()
    content_type = "application/json" if syntax == "json" else "application/yaml"
    response = post(alice, text, path, content_type=content_type)
    assert_refused(response, before, names=field)


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        ("yaml", "x-free: 18446744073709551616\n"),
        ("yaml", "x-free: " + "9" * 5000 + "\n"),
        ("yaml", "x-free: " + ":".join(["59"] * 50_000) + "\n"),
        ("json", "9" * 5000),
    ],
    ids=["2**64", "5000-digits", "base-60", "json-5000-digits"],
)
def test_integers_past_64_bits_are_refused(alice, syntax, text):
    before = stored()
    if syntax == "json":
        body = json.dumps(job_body()).replace('"spec":', f'"x-free": {text}, "spec":')
        response = post(alice, body, content_type="application/json")
    else:
        response = post(alice, job() + text)
    assert_refused(response, before, names="x-free" if "2**64" in str(text) else "")
    assert response.json()["detail"]


# Names, labels, annotations: Kubernetes' own lengths.


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda m: m.update(name="a" * 254), "metadata.name"),
        (lambda m: m.update(namespace="n" * 64), "metadata.namespace"),
        (lambda m: m["labels"].update(app="v" * 64), "metadata.labels.app"),
        (lambda m: m["labels"].update({"k" * 64: "v"}), "metadata.labels"),
        (lambda m: m["labels"].update({"p" * 254 + "/k": "v"}), "metadata.labels"),
        (lambda m: m["annotations"].update(big="x" * 256 * 1024), "metadata.annotations"),
    ],
    ids=["name", "namespace", "label-value", "label-key", "label-prefix", "annotations-size"],
)
def test_names_labels_and_annotations_past_kubernetes_lengths_are_refused(alice, change, field):
    body = job_body()
    change(body["metadata"])
    before = stored()
    assert_refused(post(alice, yaml.safe_dump(body)), before, names=field)


# Documents, body sizes, encodings.


def many_jobs(count):
    return [{**job_body(), "metadata": {"name": f"j{i}"}} for i in range(count)]


@pytest.mark.parametrize(
    ("text", "content_type"),
    [
        ("---\n".join(yaml.safe_dump(j) for j in many_jobs(101)), "application/yaml"),
        ("---\n" * 200, "application/yaml"),
        (json.dumps(many_jobs(101)), "application/json"),
        (json.dumps({"apiVersion": "v1", "kind": "List", "items": many_jobs(101)}), "text/x"),
    ],
    ids=["yaml-documents", "empty-documents", "json-array", "v1-list"],
)
def test_more_than_100_documents_are_refused(alice, text, content_type):
    content_type = "application/json" if content_type == "text/x" else content_type
    before = stored()
    response = post(alice, text, content_type=content_type)
    assert_refused(response, before, names="more than 100 documents")


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/api/v1/workloads", "application/yaml"),
        ("/api/v1/whatif", "application/json"),
        ("/api/v1/workloads/{pk}/scale", "application/json"),
        ("/api/v1/workloads/{pk}/scale", "application/x-www-form-urlencoded"),
    ],
)
def test_bodies_past_the_size_limits_answer_413(alice, inference, path, content_type):
    body = b"x" * (2 * 1024 * 1024)
    before = stored()
    response = alice.post(path.format(pk=inference), body, content_type=content_type)
    assert_refused(response, before, names="limited to", status=413)


@pytest.mark.parametrize(
    ("body", "content_type", "problem"),
    [
        (job().encode() + b"\xff\xfe", "application/yaml", "not UTF-8"),
        (job().encode("utf-16"), "application/yaml", "not UTF-8"),
        (job().encode("utf-32"), "application/yaml", "not UTF-8"),
        (
            json.dumps(job_body()).replace('"spec"', '"\\ud800"').encode(),
            "application/json",
            "unpaired UTF-16 surrogate",
        ),
        (job().encode() + b'x: "a\\u0000b"\n', "application/yaml", "NUL character"),
    ],
    ids=["invalid-utf8", "utf16-bom", "utf32-bom", "lone-surrogate", "nul"],
)
@pytest.mark.parametrize("path", ENDPOINTS)
def test_text_that_is_not_unicode_is_refused(alice, body, content_type, problem, path):
    before = stored()
    response = alice.post(f"{path}?namespace=llm", body, content_type=content_type)
    assert_refused(response, before, names=problem)


def test_a_utf8_byte_order_mark_is_read_as_kubectl_reads_it(alice):
    assert post(alice, ("\ufeff" + job()).encode()).status_code == 201


# What was stored before the bounds: pages and sockets stay up.


def test_the_queue_page_survives_quantities_stored_before_the_bound(alice, tenants):
    """Rows from before the bound (1e308 GPUs, as milli-units) made /queues/ a 500 for all."""
    created = post(alice, job())
    assert created.status_code == 201
    huge = 10**311
    for queue in ClusterQueue.objects.all():
        spec = queue.spec
        for group in spec["resource_groups"]:
            for flavor in group["flavors"]:
                for quota in flavor["resources"]:
                    quota["nominal_quota"] = huge
        ClusterQueue.objects.filter(pk=queue.pk).update(spec=spec)
    for row in Workload.objects.all():
        pod_sets = row.pod_sets
        pod_sets[0]["requests"]["nvidia.com/gpu"] = huge
        Workload.objects.filter(pk=row.pk).update(pod_sets=pod_sets)
    browser = Client()
    browser.force_login(User.objects.get(username="alice"))
    assert browser.get("/queues/").status_code == 200


def test_sums_of_capped_quantities_past_int64_still_show(alice, tenants):
    """Two pending Jobs of 999999Pi each (capped at 2^63-1 bytes) demand more than an int64:
    the queue page, the usage endpoint and /metrics read such sums unbounded."""
    for name in ("big-1", "big-2"):
        body = job_body()
        body["metadata"]["name"] = name
        requests = body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        requests["memory"] = "999999Pi"
        assert post(alice, yaml.safe_dump(body)).status_code == 201
    usage = alice.get("/api/v1/clusterqueues/gpu-queue/usage")
    assert usage.status_code == 200
    memory = next(r for r in usage.json()["resources"] if r["resource"] == "memory")
    assert int(memory["pending"]) > INT64_MAX
    browser = Client()
    browser.force_login(User.objects.get(username="alice"))
    assert browser.get("/queues/").status_code == 200
    assert Client().get("/metrics").status_code == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("short_lived_connections")
@pytest.mark.parametrize("after", ["%C2%B2", "9" * 5000, "-1", "1e3"])
async def test_a_socket_after_that_is_not_a_small_ascii_number_replays_from_the_start(after):
    from channels.db import database_sync_to_async

    user = await database_sync_to_async(User.objects.create_user)("socket")
    communicator = WebsocketCommunicator(EventsConsumer.as_asgi(), f"/ws/events/?after={after}")
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    message = await communicator.receive_json_from(timeout=5)
    assert message == {"type": "caught_up", "seq": 0}
    await communicator.disconnect()


def test_the_submit_page_refuses_an_alias_bomb_next_to_the_field(alice, tenants):
    browser = Client()
    browser.force_login(User.objects.get(username="alice"))
    before = stored()
    for action in ("whatif", "apply"):
        response = browser.post(
            "/submit/",
            {
                "cluster": tenants.name,
                "namespace": "llm",
                "manifest": job() + "x-payload:\n" + laughs(9),
                "action": action,
            },
        )
        assert response.status_code == 400
        assert "expand to more than" in response.content.decode()
    assert stored() == before
