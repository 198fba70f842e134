"""The fake GKE and Kubernetes APIs on free local ports, and the real GKE client."""

from __future__ import annotations

import pytest

from clusters.models import Cluster
from clusters.providers.gke import GkeProvider
from tests.contract import existing
from tests.contract.fake_gke import FakeGke, existing_cluster
from tests.contract.fake_kube import FakeKube
from tests.support import GPU_QUEUES, NAMESPACE, at, deployment, job
from workloads import services
from workloads.kube.client import from_endpoint


@pytest.fixture(autouse=True)
def insecure_kube_servers(settings):
    """The fakes serve plain http on loopback: allowed only by this development setting."""
    settings.ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS = True


@pytest.fixture
def fake_gke():
    with FakeGke() as fake:
        yield fake


@pytest.fixture
def gke(fake_gke):
    return GkeProvider(api_endpoint=fake_gke.url)


@pytest.fixture
def fake_kube():
    with FakeKube() as fake:
        yield fake


@pytest.fixture
def existing_kube(fake_kube):
    """The apiserver of a cluster set up without Accelplane (tests/contract/existing.py).
    Its watches end as soon as they have sent what is pending: each session of these tests
    reads what the test put before it, and a whole second per session adds up."""
    existing.fill(fake_kube)
    fake_kube.max_watch_seconds = 0.05
    return fake_kube


@pytest.fixture
def gke_endpoint(settings, fake_gke):
    settings.ACCELPLANE_GKE_ENDPOINT = fake_gke.url


@pytest.fixture
def in_gke(fake_gke, gke_endpoint):
    """ml-prod, made with gcloud: default, L4 GPU and v5e TPU pools; and a second cluster."""
    fake_gke.add_existing(existing.PROJECT, existing.REGION, existing_cluster())
    fake_gke.add_existing(
        existing.PROJECT, existing.REGION, {**existing_cluster("batch"), "nodePools": []}
    )
    return f"projects/{existing.PROJECT}/locations/{existing.REGION}/clusters/ml-prod"


@pytest.fixture
def api(fake_kube):
    with from_endpoint(fake_kube.url) as api:
        yield api


def gpu_cluster_on(fake_kube: FakeKube) -> Cluster:
    """A running gke cluster whose apiserver is the fake, with the GPU queues, a fine-tune
    Job and an inference Deployment submitted (Kueue has not admitted them yet)."""
    cluster = Cluster.objects.create(
        name="llm-cluster",
        provider="gke",
        project="acme-ml",
        status=Cluster.Status.RUNNING,
        endpoint=fake_kube.url,
    )
    for text in (GPU_QUEUES, job(), deployment()):
        services.apply(
            cluster, text, source="t.yaml", now=at(), namespace=NAMESPACE, admit=services.Admit.SKIP
        )
    return cluster
