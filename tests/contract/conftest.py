"""The fake GKE and Kubernetes APIs on free local ports, and the real GKE client."""

from __future__ import annotations

import pytest

from clusters.providers.gke import GkeProvider
from tests.contract.fake_gke import FakeGke
from tests.contract.fake_kube import FakeKube


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
