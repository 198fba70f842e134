"""The fake GKE API on a free local port, and the real client pointed at it."""

from __future__ import annotations

import pytest

from clusters.providers.gke import GkeProvider
from tests.contract.fake_gke import FakeGke


@pytest.fixture
def fake_gke():
    with FakeGke() as fake:
        yield fake


@pytest.fixture
def gke(fake_gke):
    return GkeProvider(api_endpoint=fake_gke.url)
