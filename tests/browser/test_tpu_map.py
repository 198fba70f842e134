"""The TPU map of an eight-cube cluster in Chromium: one screen, hover text, live slice states."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import expect

from clusters import services as cluster_services
from clusters.models import Cluster
from tests.support import tpu_jobset
from tests.unit.test_tpu_admission import lws
from tests.unit.test_tpu_admission import queues as tpu_queues
from workloads import admission, services
from workloads.models import Slice

pytestmark = pytest.mark.django_db(transaction=True)

WIDTH, HEIGHT = 1400, 900


@pytest.fixture(scope="module")
def browser_context_args():
    return {"viewport": {"width": WIDTH, "height": HEIGHT}}


@pytest.fixture
def eight_cubes():
    """The dynamic-slicing seed's workloads on eight cubes, run for five minutes: six 2x2x2
    sub-slices of a JobSet, a 4x4x8 super-slice, an LWS of four 2x2x2 groups."""
    now = timezone.now()
    start = now - timedelta(minutes=5)
    cluster = Cluster.objects.create(name="tpu-serving-cluster", status=Cluster.Status.RUNNING)
    for index in range(1, 9):
        cluster_services.provision_now(
            cluster,
            name=f"tpu7-pool-{index}",
            machine_type="tpu7x-standard-4t",
            node_count=16,
            tpu_topology="4x4x4",
            block="block-0",
            at=start,
        )
    for text in (
        tpu_queues(),
        tpu_jobset("subslicing", "2x2x2", replicas=6),
        tpu_jobset("superslicing", "4x4x8", replicas=1, parallelism=32),
        lws(replicas=4),
    ):
        services.apply(cluster, text, source="seed.yaml", now=start, namespace="llm")
    admission.advance(cluster, start, now)
    return cluster, now


def test_eight_cubes_fit_one_screen_with_hover_details_and_live_slices(
    server, page, log_in, eight_cubes
):
    cluster, now = eight_cubes
    log_in(User.objects.create_user("root", is_staff=True))
    # One more JobSet whose slice is still activating when the page loads.
    services.apply(
        cluster,
        tpu_jobset("late", "2x2x4", replicas=1, parallelism=4),
        source="late.yaml",
        now=now,
        namespace="llm",
    )
    admission.advance(cluster, now, now + timedelta(seconds=1))
    assert Slice.objects.filter(state=Slice.State.ACTIVATING).count() == 1

    page.goto(f"{server.url}/clusters/{cluster.name}/tpu/")
    expect(page.locator("#live-status")).to_have_text("live")
    page.evaluate("window.notReloaded = true")

    picture = page.locator("svg.tpu-map")
    expect(picture).to_be_visible()
    expect(picture.locator("g.cube")).to_have_count(8)
    expect(picture.locator("rect.chip")).to_have_count(8 * 64)
    box = picture.bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= WIDTH
    assert box["y"] + box["height"] <= HEIGHT, f"the picture ends at {box['y'] + box['height']}px"
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH

    (super_slice,) = Slice.objects.filter(workload__owner__name="superslicing")
    host = picture.locator(f'g.host[data-host="{super_slice.hosts[0]}"]')
    host.hover()
    title = host.locator("title")
    expect(title).to_contain_text(super_slice.hosts[0])
    expect(title).to_contain_text("super-slice over")
    expect(title).to_contain_text("workload JobSet/llm/superslicing")
    expect(picture.locator("line.link")).to_have_count(1)
    expect(picture.locator("g.host.activating")).to_have_count(4)

    # The slice turns ACTIVE: the picture follows without a reload.
    admission.advance(cluster, now + timedelta(seconds=1), now + timedelta(seconds=60))
    expect(picture.locator("g.host.activating")).to_have_count(0)
    expect(page.locator("svg.tpu-map g.slice.activating")).to_have_count(0)
    assert page.evaluate("window.notReloaded") is True
