"""What the browser shows without a reload: a preemption, a reconnect's replay, tenancy."""

from __future__ import annotations

import json
import urllib.request

import pytest
from django.db.models import Max
from django.utils import timezone
from playwright.sync_api import expect

from events.models import Event
from teams import services as teams
from tests.support import deployment
from web import panels
from workloads import services

pytestmark = pytest.mark.django_db(transaction=True)


def scale_over_rest(server, obj, replicas, token):
    request = urllib.request.Request(
        f"{server.url}/api/v1/workloads/{obj.pk}/scale",
        data=json.dumps({"replicas": replicas}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def gpu_used(page):
    return page.locator('tr[data-resource="nvidia.com/gpu"] .used-count')


def test_a_scale_over_the_api_shows_the_preemption_live(server, context, log_in, gpu_demo):
    log_in(gpu_demo.admin)
    overview, workloads, detail = context.new_page(), context.new_page(), context.new_page()
    overview.goto(f"{server.url}/")
    workloads.goto(f"{server.url}/workloads/")
    detail.goto(f"{server.url}/workloads/{gpu_demo.finetune.pk}/")
    for page in (overview, workloads, detail):
        expect(page.locator("#live-status")).to_have_text("live")
        page.evaluate("window.notReloaded = true")
    expect(gpu_used(overview)).to_have_text("6")
    finetune = workloads.locator('tr[data-key="llm-cluster:Job/llm/finetune"]')
    expect(finetune.locator(".badge")).to_have_text("Admitted")
    _, token = teams.issue_token(gpu_demo.member)

    scale_over_rest(server, gpu_demo.chat, 2, token)

    preempted = overview.locator("[data-feed] li.ev-workloadpreempted")
    expect(preempted).to_contain_text("Job/llm/finetune")
    expect(preempted).to_contain_text("preempted by Deployment/llm/chat")
    expect(gpu_used(overview)).to_have_text("4")
    expect(finetune.locator(".badge")).to_have_text("Suspended")
    expect(detail.locator("#object-phase")).to_have_text("Suspended")
    expect(detail.locator(".timeline li.ev-workloadpreempted")).to_contain_text("chat")
    expect(detail.get_by_role("region", name="Why")).to_contain_text("Last preempted")
    for page in (overview, workloads, detail):
        assert page.evaluate("window.notReloaded") is True


def test_pages_served_over_wsgi_go_live_on_the_sockets_server(
    server, http_server, context, log_in, gpu_demo
):
    """make stack: the page comes from the HTTP server, its socket goes to the sockets server
    the page names, and a change over the HTTP server's REST API reaches it live."""
    log_in(gpu_demo.admin)  # the session cookie is the host's, whatever the port
    page = context.new_page()
    sockets: list[str] = []
    page.on("websocket", lambda socket: sockets.append(socket.url))
    page.goto(f"{http_server.url}/")
    expect(page.locator("#live-status")).to_have_text("live")
    assert sockets
    assert all(url.startswith(f"ws://127.0.0.1:{server.port}/ws/events/") for url in sockets)
    _, token = teams.issue_token(gpu_demo.member)

    scale_over_rest(http_server, gpu_demo.chat, 2, token)

    preempted = page.locator("[data-feed] li.ev-workloadpreempted")
    expect(preempted).to_contain_text("Job/llm/finetune")
    expect(gpu_used(page)).to_have_text("4")


def test_a_reconnect_replays_the_events_missed_while_offline(server, page, log_in, gpu_demo):
    log_in(gpu_demo.admin)
    sockets = []
    page.on("websocket", lambda socket: sockets.append(socket.url))
    page.goto(f"{server.url}/")
    expect(page.locator("#live-status")).to_have_text("live")
    seen = Event.objects.aggregate(last=Max("seq"))["last"]

    server.stop()
    expect(page.locator("#live-status")).to_have_text("reconnecting…")
    services.scale(gpu_demo.chat, 2, timezone.now())  # while no server could push it
    # The overview's feed leaves out the simulated cluster's pod and progress news.
    missed = list(
        Event.objects.filter(seq__gt=seen)
        .exclude(kind__in=panels.FEED_SKIPS)
        .values_list("seq", flat=True)
    )
    server.start()

    expect(page.locator("#live-status")).to_have_text("live")
    expect(page.locator("[data-feed] li.ev-workloadpreempted")).to_have_count(1)
    shown = [
        int(s)
        for s in page.locator("[data-feed] li").evaluate_all(
            "items => items.map(item => item.dataset.seq)"
        )
    ]
    assert set(missed) <= set(shown)
    assert len(shown) == len(set(shown)), "an event was shown twice"
    assert sockets[-1].endswith(f"/ws/events/?after={seen}")


def test_a_team_member_sees_only_their_teams_workloads_and_events(server, page, log_in, gpu_demo):
    cluster = gpu_demo.cluster
    teams.ensure_team("vision", namespaces=["vision"])
    services.apply(
        cluster,
        deployment("detector", queue=None),
        source="vision.yaml",
        now=timezone.now(),
        namespace="vision",
    )
    log_in(gpu_demo.member)
    page.goto(f"{server.url}/workloads/")
    expect(page.locator("#live-status")).to_have_text("live")
    rows = page.locator("tbody tr[data-key]")
    expect(rows).to_have_count(2)
    detector = services.get_object(cluster, "Deployment", "vision", "detector")

    services.scale(detector, 2, timezone.now())
    services.apply(
        cluster, deployment("tokenizer"), source="t.yaml", now=timezone.now(), namespace="llm"
    )

    # Events arrive in sequence order: once llm's new row is shown, vision's was decided on.
    expect(rows).to_have_count(3)
    expect(page.locator('tr[data-key="llm-cluster:Deployment/llm/tokenizer"]')).to_be_visible()
    expect(page.get_by_text("detector")).to_have_count(0)

    page.goto(f"{server.url}/")
    expect(page.locator("#live-status")).to_have_text("live")
    services.scale(detector, 3, timezone.now())
    services.scale(gpu_demo.chat, 2, timezone.now())

    feed = page.locator("[data-feed]")
    expect(feed.locator("li.ev-workloadscaled")).to_contain_text("Deployment/llm/chat")
    expect(feed).not_to_contain_text("vision")
    assert page.goto(f"{server.url}/workloads/{detector.pk}/").status == 404
