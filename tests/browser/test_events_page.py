"""/events/ in the browser: a new event matching the filters appears without a reload."""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from workloads import services

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_matching_event_appears_live_and_others_stay_out(server, page, log_in, gpu_demo):
    log_in(gpu_demo.admin)
    page.goto(f"{server.url}/events/?kind=Deployment")
    expect(page.locator("#live-status")).to_have_text("live")
    page.evaluate("window.notReloaded = true")
    feed = page.locator("ol[data-feed]")
    expect(feed.locator("li.ev-workloadscaled")).to_have_count(0)

    services.scale(gpu_demo.chat, 2, timezone.now())  # preempts the Job `finetune`

    scaled = feed.locator("li.ev-workloadscaled")
    expect(scaled).to_have_count(1)
    expect(scaled).to_contain_text("Deployment/llm/chat")
    # The Job's preemption is an event too, but not about a Deployment.
    expect(feed).not_to_contain_text("Job/llm/finetune")
    assert page.evaluate("window.notReloaded") is True
