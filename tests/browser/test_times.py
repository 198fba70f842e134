"""Times look the same whether the server rendered the row or the page script added it."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from workloads import services

pytestmark = pytest.mark.django_db(transaction=True)

TODAY = re.compile(r"\d\d:\d\d:\d\d")


def test_a_live_event_shows_its_time_as_the_server_rendered_ones(server, page, log_in, gpu_demo):
    log_in(gpu_demo.admin)
    page.goto(f"{server.url}/")
    expect(page.locator("#live-status")).to_have_text("live")
    rendered = page.locator("[data-feed] li time").first
    rendered_title = rendered.get_attribute("title")

    services.scale(gpu_demo.chat, 2, timezone.now())

    live = page.locator("[data-feed] li.ev-workloadpreempted time")
    expect(live).to_have_text(TODAY)
    expect(rendered).to_have_text(TODAY)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", live.get_attribute("title"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", rendered_title)
