"""An admin creates a node pool through the form and watches its operation until nodes appear."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from clusters import services as cluster_services
from clusters.models import NodePool

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_node_pool_made_in_the_form_appears_live_with_its_nodes(
    server, page, log_in, gpu_demo, settings
):
    settings.ACCELPLANE_SIM_OPERATION_SECONDS = 0  # this process plays the worker
    log_in(gpu_demo.admin)
    page.goto(f"{server.url}/clusters/llm-cluster/nodepools/new/")

    page.get_by_label("Name").fill("v5e-serving")
    page.get_by_label("Machine type").select_option("ct5lp-hightpu-4t")
    page.get_by_label("Node count").fill("3")
    page.get_by_label("TPU topology").select_option("2x4")
    page.get_by_role("button", name="Create").click()

    node_count = page.locator(".field", has=page.get_by_label("Node count"))
    expect(node_count.locator(".error")).to_contain_text("must be 2")
    assert not NodePool.objects.filter(name="v5e-serving").exists()

    page.get_by_label("Node count").fill("2")
    page.get_by_role("button", name="Create").click()

    pool = page.locator("#pool-v5e-serving")
    expect(pool.locator(".badge")).to_have_text("PROVISIONING")
    expect(pool.locator(".operation")).to_contain_text("Provisioning")
    page.evaluate("window.notReloaded = true")

    row = NodePool.objects.get(name="v5e-serving")
    while not cluster_services.reconcile_node_pool(row.pk).done:
        pass

    expect(pool.locator(".badge")).to_have_text("RUNNING")
    expect(pool.locator("tbody tr")).to_have_count(2)
    expect(pool).to_contain_text("4 × tpu-v5-lite-podslice")
    assert page.evaluate("window.notReloaded") is True
