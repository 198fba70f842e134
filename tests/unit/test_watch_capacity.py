"""The watcher's capacity (issue 17): a watch session per resource of every watched cluster,
each on a thread of the `watch` queue's worker, so the pool follows the number of clusters
(ACCELPLANE_MAX_WATCHED_CLUSTERS) times the watched resources instead of a fixed 32 that
covered two clusters."""

from __future__ import annotations

import logging

import pytest

from clusters.models import Cluster
from controlplane.celery import app
from workloads import tasks
from workloads.kube import watch

pytestmark = [
    pytest.mark.django_db,
    # Constructing a worker as root (the test container) warns; nothing is started.
    pytest.mark.filterwarnings("ignore::celery.platforms.SecurityWarning"),
]


def _clusters(count):
    return [
        Cluster.objects.create(
            name=f"c{i}",
            provider="gke",
            project="p",
            status="RUNNING",
            endpoint=f"https://10.0.0.{i}",
        )
        for i in range(1, count + 1)
    ]


@pytest.fixture
def started(monkeypatch):
    sessions = []
    monkeypatch.setattr(tasks.watch_resource, "delay", lambda *s: sessions.append(s))
    return sessions


@pytest.fixture
def watcher(monkeypatch):
    """The watcher as `controlplane/run.py` and docker-compose start it, not started; the
    app's configuration its start changes is restored after the test."""
    monkeypatch.setitem(app.conf, "worker_concurrency", None)

    def make(**options):
        return app.Worker(hostname="watcher@test", queues=["watch"], pool_cls="threads", **options)

    return make


def test_three_clusters_get_every_watch_and_a_thread_for_each(started, watcher):
    clusters = _clusters(3)

    tasks.watch_clusters()

    assert sorted(started) == sorted((c.pk, r) for c in clusters for r in watch.WATCHED)
    pool = watcher().concurrency
    assert pool == watch.watcher_threads() >= len(started) == 3 * len(watch.WATCHED)
    assert len(started) > 32  # what the fixed pool held


def test_the_pool_follows_the_setting_and_a_command_line_concurrency_wins(settings, watcher):
    settings.ACCELPLANE_MAX_WATCHED_CLUSTERS = 3
    assert watcher().concurrency == 3 * len(watch.WATCHED)
    assert watcher(concurrency=5).concurrency == 5


def test_clusters_past_the_bound_are_not_watched_and_named_in_the_log(started, settings, caplog):
    settings.ACCELPLANE_MAX_WATCHED_CLUSTERS = 2
    first, second, third = _clusters(3)

    with caplog.at_level(logging.WARNING, logger="workloads.tasks"):
        tasks.watch_clusters()

    assert {pk for pk, _ in started} == {first.pk, second.pk}
    assert "not watching c3: ACCELPLANE_MAX_WATCHED_CLUSTERS is 2" in caplog.text
