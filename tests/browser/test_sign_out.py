"""Logging out in one tab closes the live stream of every other tab of that session: they say
"signed out" and stop reconnecting, instead of streaming the team's events on."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db(transaction=True)


def test_logging_out_in_one_tab_signs_the_others_out(server, context, log_in, gpu_demo):
    log_in(gpu_demo.member)
    watching, leaving = context.new_page(), context.new_page()
    for page in (watching, leaving):
        page.goto(f"{server.url}/")
        expect(page.locator("#live-status")).to_have_text("live")

    leaving.get_by_role("button", name="Log out").click()

    expect(watching.locator("#live-status")).to_have_text("signed out")
