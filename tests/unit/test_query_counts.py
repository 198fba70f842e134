"""No list page or list endpoint costs a query per row: each is read with N objects, then with 5N,
and must run as many queries both times (AWX pins its capacity model the same way). The counts
are compared, not pinned, so a new N+1 fails here while a new constant query does not."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters import services as cluster_services
from clusters.models import Cluster
from events.services import number_events
from teams import services as teams
from tests.api.conftest import client_for
from tests.support import GPU_QUEUES, at, deployment, job
from workloads import admission, checkpoints, services
from workloads.models import KubeObject

N = 2
CLUSTER = "llm-cluster"
# A ClusterQueue without quota: what is queued to it stays pending.
STARVED = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: starved}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: ["cpu", "memory", "nvidia.com/gpu"]
      flavors:
        - name: l4
          resources:
            - {name: cpu, nominalQuota: 0}
            - {name: memory, nominalQuota: 0}
            - {name: nvidia.com/gpu, nominalQuota: 0}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-starved, namespace: llm}
spec: {clusterQueue: starved}
"""


def kueue_objects(i: int) -> str:
    """One object of every Kueue kind the API lists, named after `i`."""
    return f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {{name: topology-{i}}}
spec:
  levels: [{{nodeLabel: kubernetes.io/hostname}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: flavor-{i}}}
spec: {{nodeLabels: {{pool: p{i}}}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {{name: check-{i}}}
spec: {{controllerName: example.com/check-{i}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {{name: cohort-{i}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: queue-{i}}}
spec:
  namespaceSelector: {{}}
  cohortName: cohort-{i}
  resourceGroups:
    - coveredResources: [cpu]
      flavors: [{{name: flavor-{i}, resources: [{{name: cpu, nominalQuota: 4}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: local-{i}, namespace: llm}}
spec: {{clusterQueue: queue-{i}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {{name: wpc-{i}}}
value: {i}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: pc-{i}}}
value: {1000 + i}
"""


class World:
    """Objects of every listed kind, grown in steps: `grow(n)` adds n of each."""

    def __init__(self) -> None:
        self.size = 0
        self.minutes = 0
        self.cluster = Cluster.objects.create(name=CLUSTER, status=Cluster.Status.RUNNING)
        teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
        self.root = User.objects.create_user("root", is_staff=True)

    def grow(self, n: int) -> None:
        start, self.size = self.size, self.size + n
        cluster, new = self.cluster, range(start, self.size)
        # One GPU node per training job and per server, and the quota for all of them.
        cluster_services.provision_now(
            cluster, name=f"gpupool-{start}", machine_type="g2-standard-24", node_count=n
        )
        cluster_services.provision_now(
            cluster,
            name=f"v5e-{start}",
            machine_type="ct5lp-hightpu-8t",
            node_count=1,
            tpu_topology="2x4",
        )
        quota = GPU_QUEUES.replace("nominalQuota: 6", f"nominalQuota: {2 * self.size}")
        quota = quota.replace("nominalQuota: 72", "nominalQuota: 1000")
        quota = quota.replace("nominalQuota: 288Gi", "nominalQuota: 4000Gi")
        manifests = [quota, STARVED] + [kueue_objects(i) for i in new]
        for i in new:
            manifests += [
                job(f"train-{i}", pods=1, gpus=1),
                deployment(f"serve-{i}", gpus=1, priority_class="low"),
                deployment(f"plain-{i}", queue=None),
                job(f"wait-{i}", pods=1, gpus=1).replace("team-llm", "team-starved"),
            ]
        now = at(minutes=self.minutes)
        for text in manifests:
            services.apply(cluster, text, source="test.yaml", now=now, namespace="llm")
        self.minutes += 10
        admission.advance(cluster, now, at(minutes=self.minutes))
        for i in new:
            obj = KubeObject.objects.get(kind="Job", namespace="llm", name=f"train-{i}")
            checkpoints.report(obj, 1, at(minutes=self.minutes))
        for i in new:
            extra = Cluster.objects.create(name=f"other-{i}", status=Cluster.Status.RUNNING)
            cluster_services.provision_now(
                extra, name="pool", machine_type="g2-standard-24", node_count=1
            )
            teams.ensure_team(
                f"team-{i}",
                namespaces=[f"ns-{i}"],
                members=[(f"lead-{i}", "submitter"), (f"viewer-{i}", "viewer")],
            )
            teams.issue_token(self.root, name=f"token-{i}")
            teams.issue_token(User.objects.get(username="alice"), name=f"token-{i}")


@pytest.fixture
def world(db):
    return World()


def queries(get, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = get(path)
    assert response.status_code == 200, (path, response.content[:500])
    return len(captured)


def assert_constant(world: World, get, paths: list[str]) -> None:
    """The queries of each path with N objects of each kind and with 5N are as many. All the
    paths are read in one world: growing it is what takes the time."""
    world.grow(N)
    number_events()  # as the commits of the growth would have (a test's transaction never ends)
    for path in paths:
        get(path)  # a token's first use is recorded once: measure the requests after it
    small = {path: queries(get, path) for path in paths}
    world.grow(4 * N)
    number_events()
    large = {path: queries(get, path) for path in paths}
    grew = {path: (small[path], large[path]) for path in paths if small[path] != large[path]}
    assert not grew, f"queries with {N} of each, then {5 * N}, by path: {grew}"


PAGES = [
    "/",
    "/workloads/",
    "/workloads/?fragment=row",
    "/workloads/?phase=Admitted&queue=team-llm&team=llm&kind=Job",
    f"/workloads/?cluster={CLUSTER}",
    f"/clusters/{CLUSTER}/?fragment=utilisation",
    "/queues/",
    f"/queues/?cluster={CLUSTER}",
    f"/clusters/{CLUSTER}/",
    f"/clusters/{CLUSTER}/tpu/",
    "/submit/",
    "/platform/",
    "/events/",
    "/events/?type=workload.admitted&namespace=llm",
    "/events/audit/",
    f"/clusters/{CLUSTER}/clusterqueues/gpu-queue/",
    f"/clusters/{CLUSTER}/clusterqueues/starved/",
    f"/clusters/{CLUSTER}/namespaces/llm/localqueues/team-starved/",
    f"/clusters/{CLUSTER}/namespaces/llm/localqueues/team-llm/",
    f"/clusters/{CLUSTER}/kueue/clusterqueue/gpu-queue/",
    f"/clusters/{CLUSTER}/kueue/clusterqueue/gpu-queue/edit/",
]
ADMIN_PAGES = {
    p
    for p in PAGES
    if p.startswith(("/platform/", "/events/audit/", f"/clusters/{CLUSTER}/kueue/"))
}


def test_no_page_costs_a_query_per_object_as_an_admin(world, client):
    client.force_login(world.root)
    assert_constant(world, client.get, PAGES)


def test_no_page_costs_a_query_per_object_as_a_team_member(world, client):
    client.force_login(User.objects.get(username="alice"))
    assert_constant(world, client.get, [p for p in PAGES if p not in ADMIN_PAGES])


ENDPOINTS = [
    "/api/v1/workloads",
    "/api/v1/workloads?queue=team-llm&phase=Admitted",
    "/api/v1/clusters",
    "/api/v1/clusters/1/nodepools",
    "/api/v1/clusterqueues?cluster=" + CLUSTER,
    "/api/v1/resourceflavors?cluster=" + CLUSTER,
    "/api/v1/cohorts?cluster=" + CLUSTER,
    "/api/v1/localqueues?cluster=" + CLUSTER,
    "/api/v1/workloadpriorityclasses?cluster=" + CLUSTER,
    "/api/v1/priorityclasses?cluster=" + CLUSTER,
    "/api/v1/topologies?cluster=" + CLUSTER,
    "/api/v1/admissionchecks?cluster=" + CLUSTER,
    "/api/v1/teams",
    "/api/v1/tokens",
    "/api/v1/events?limit=1000",
    "/api/v1/configurations?cluster=" + CLUSTER,
    "/api/v1/clusters/1/kueue.yaml",
    "/metrics",
]


@pytest.mark.parametrize("username", ["root", "alice"])
def test_no_list_endpoint_costs_a_query_per_object(world, username):
    api = client_for(User.objects.get(username=username))
    paths = [p.replace("/clusters/1/", f"/clusters/{world.cluster.pk}/") for p in ENDPOINTS]
    assert_constant(world, api.get, paths)


def test_a_submission_costs_the_same_queries_however_many_workloads_exist(world, monkeypatch):
    """Submitting a Job (and the admission run it starts) reads the cluster in a fixed number
    of queries, not one per workload, pod or queue already there."""
    api = client_for(User.objects.get(username="alice"))
    # The world's clock, not the wall clock: the simulator would otherwise run until today.
    monkeypatch.setattr("api.workloads.now", lambda: at(minutes=world.minutes))

    def submit(name: str) -> int:
        manifest = job(name, pods=1, gpus=1).replace("team-llm", "team-starved")
        with CaptureQueriesContext(connection) as captured:
            response = api.post(
                f"/api/v1/workloads?namespace=llm&cluster={CLUSTER}",
                manifest,
                content_type="application/yaml",
            )
        assert response.status_code == 201, response.content
        return len(captured)

    # Each probe follows a warm-up: a token's first use is recorded once, and newly grown
    # jobs report their first training progress once.
    world.grow(N)
    submit("warm-up")
    small = submit("probe-small")
    world.grow(4 * N)
    submit("warm-up-large")
    large = submit("probe-large")
    assert large == small, f"{small} queries with {N} of each, {large} with {5 * N}"


@pytest.mark.parametrize("gpus", [0, 500], ids=["admitted", "pending"])
@pytest.mark.parametrize("path", ["/workloads/{pk}/", "/api/v1/workloads/{pk}/explain"])
def test_explaining_a_deployment_costs_the_same_queries_for_few_replicas_and_many(
    world, client, path, gpus
):
    """A Deployment's page and its explain endpoint explain each replica's Kueue workload: the
    cluster is read once for all of them, not once per replica."""
    client.force_login(world.root)
    get = client.get if path.startswith("/workloads/") else client_for(world.root).get
    world.grow(N)

    def scaled_to(replicas: int) -> int:
        manifest = deployment("wide", replicas=replicas, gpus=gpus)
        now = at(minutes=world.minutes)
        services.apply(world.cluster, manifest, source="test.yaml", now=now, namespace="llm")
        admission.advance(world.cluster, now, at(minutes=world.minutes + 1))
        world.minutes += 1
        url = path.format(pk=KubeObject.objects.get(name="wide").pk)
        get(url)  # a token's first use is recorded once: measure the request after it
        return queries(get, url)

    small, large = scaled_to(N), scaled_to(5 * N)
    assert large == small, f"{path}: {small} queries with {N} replicas, {large} with {5 * N}"
