"""Signing in from the login page (by keyboard too); the navigation offers only what the user
may do."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_admin_logs_in_and_sees_the_admin_navigation(server, page, gpu_demo):
    page.goto(f"{server.url}/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))

    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("enter a correct username and password")

    # Again from the keyboard alone.
    page.get_by_label("Username").focus()
    page.keyboard.press("Tab")
    page.keyboard.type("s3cret-pass")
    page.keyboard.press("Enter")

    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Admin")).to_be_visible()
    expect(page.locator("#live-status")).to_have_text("live")


def test_a_team_member_sees_no_admin_link(server, page, log_in, gpu_demo):
    log_in(gpu_demo.member)

    page.goto(f"{server.url}/")

    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Submit")).to_be_visible()
    expect(nav.get_by_role("link", name="Admin")).to_have_count(0)
