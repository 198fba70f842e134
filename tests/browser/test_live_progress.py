"""Pods becoming ready and training progress reach open pages without a reload
(workload.pods, workload.progress, checkpoint.saved: workloads/live.py)."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import expect

from tests.browser.conftest import running
from tests.support import GPU_QUEUES, job
from workloads import admission, checkpoints, services
from workloads.models import KubeObject

pytestmark = pytest.mark.django_db(transaction=True)


def latest_checkpoint(obj):
    return checkpoints.latest_steps([obj.pk]).get(obj.pk, 0)


def shown_step(page):
    return int(page.locator("#training-step").inner_text())


def test_pods_becoming_ready_and_training_progress_show_live(server, context, log_in, cluster):
    # The pods become ready a minute before the test starts; the clock is driven from here.
    start = timezone.now() - timedelta(minutes=6)
    services.apply(cluster, GPU_QUEUES, source="queues.yaml", now=start)
    manifest = job("finetune", startup="5m", step_time="2s", checkpoint_every=5)
    services.apply(cluster, manifest, source="finetune.yaml", now=start, namespace="llm")
    admission.advance(cluster, start, start + timedelta(minutes=1))
    finetune = KubeObject.objects.get(kind="Job", name="finetune")
    log_in(User.objects.create_superuser("admin", "admin@example.com", "s3cret-pass"))
    detail, workloads = context.new_page(), context.new_page()
    detail.goto(f"{server.url}/workloads/{finetune.pk}/")
    workloads.goto(f"{server.url}/workloads/")
    for page in (detail, workloads):
        expect(page.locator("#live-status")).to_have_text("live")
        page.evaluate("window.notReloaded = true")
    status = detail.get_by_role("region", name="Status")
    placement = detail.get_by_role("region", name="Placement")
    row = workloads.locator('tr[data-key="llm-cluster:Job/llm/finetune"]')
    expect(status).to_contain_text("0 pods running")
    expect(placement.locator("tbody tr")).to_have_count(2)
    expect(placement.locator("tbody td", has_text=re.compile("^no$"))).to_have_count(2)
    expect(detail.locator("#training")).to_have_count(0)

    first = timezone.now()
    admission.advance(cluster, start + timedelta(minutes=1), first)

    expect(status).to_contain_text("2 pods running")
    expect(placement.locator("tbody td", has_text=re.compile("^yes$"))).to_have_count(2)
    saved = latest_checkpoint(finetune)
    assert saved >= 25  # a minute of 2 s steps, a checkpoint every 5
    expect(detail.locator("#checkpoint-step")).to_have_text(str(saved))
    expect(detail.get_by_role("region", name="Checkpoints")).to_contain_text(str(saved))
    expect(running(row)).to_have_text("2")
    expect(row).to_contain_text(f"step {saved}")
    step = shown_step(detail)
    assert step >= saved

    time.sleep(11)  # past the next checkpoint (every 10 s) on the wall clock
    admission.advance(cluster, first, timezone.now())

    later = latest_checkpoint(finetune)
    assert later > saved
    expect(detail.locator("#checkpoint-step")).to_have_text(str(later))
    expect(row).to_contain_text(f"step {later}")
    assert shown_step(detail) > step
    for page in (detail, workloads):
        assert page.evaluate("window.notReloaded") is True
