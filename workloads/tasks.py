from __future__ import annotations

import logging
import math
from typing import Any

from celery import shared_task
from celery.signals import celeryd_init
from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from clusters.models import Cluster
from events.services import numbered_at_the_end
from workloads import admission, live, parking
from workloads.kube import watch

logger = logging.getLogger(__name__)

# While set, a settle of the cluster is queued: later changes ride on it. It expires, so a
# lost task (or, without Redis, a cache the worker does not share) delays admission only
# until then, and the live tick runs admission every few seconds anyway.
SETTLE_QUEUED_SECONDS = 2
# A queued settle waits this long before it runs, so that one run admits a whole burst of
# submissions instead of a run per submission keeping a worker busy (Kueue batches the same
# way, one scheduling cycle at a time).
SETTLE_DELAY_SECONDS = 0.2


def _settle_queued(cluster_id: int) -> str:
    return f"accelplane:settle-queued:{cluster_id}"


def admit_soon(cluster: Cluster) -> None:
    """Queue admission for the cluster once this transaction commits, once per burst."""
    transaction.on_commit(
        lambda: _settle_once(
            cluster.pk,
            _settle_queued(cluster.pk),
            SETTLE_QUEUED_SECONDS,
            countdown=SETTLE_DELAY_SECONDS,
        )
    )


def _settle_once(cluster_id: int, key: str, timeout: int, **when: Any) -> None:
    """A settle of the cluster (`when`: countdown or eta), unless one is already queued under
    `key`, which stays taken for `timeout` seconds."""
    try:
        if cache.add(key, True, timeout=timeout):
            settle_cluster.apply_async((cluster_id,), **when)
    except (RedisError, OperationalError) as error:
        # The change is committed; beat's live tick settles the cluster once Redis is back.
        logger.warning("settle of cluster %s not queued: %s", cluster_id, error)


@shared_task(ignore_result=True)
def settle_cluster(cluster_id: int) -> None:
    """Admission and the simulated cluster at the current time, after API changes."""
    # Cleared before reading the cluster: a change committed from here on queues a new run.
    cache.delete(_settle_queued(cluster_id))
    # The changes that queued this run left their events to it (services._change): committed
    # before the key was cleared, or else they queue a run of their own. The run numbers
    # theirs and its own once, when it ends, in the order they were written.
    with numbered_at_the_end():
        cluster = Cluster.objects.filter(pk=cluster_id, status=Cluster.Status.RUNNING).first()
        if cluster is not None:
            admission.settle(cluster, timezone.now())
            requeue_on_time(cluster_id)


@shared_task(ignore_result=True)
def tick_clusters() -> None:
    """Live mode: move every running simulated cluster to the current wall time, and report
    what the watches of real clusters mirrored since the last tick."""
    for cluster_id in admission.tick_live():
        requeue_on_time(cluster_id)
    live.report_mirrored(timezone.now())


def requeue_on_time(cluster_id: int) -> None:
    """Live mode, after a run: a settle of the cluster at its next requeue, a batch period
    after the release it counts, when Kueue's requeuer would run, rather than at beat's next
    tick (1-3 s after). One task per requeue, however many runs ask."""
    due = parking.next_requeue(cluster_id)
    if due is None:
        return
    wait = max(0.0, (due - timezone.now()).total_seconds())
    key = f"accelplane:requeue-queued:{cluster_id}:{due.timestamp()}"
    _settle_once(cluster_id, key, math.ceil(wait) + SETTLE_QUEUED_SECONDS, eta=due)


@shared_task(ignore_result=True)
def watch_clusters() -> None:
    """Beat: a watch of each resource of every reachable GKE cluster that nobody is watching
    (its lease), for the oldest ACCELPLANE_MAX_WATCHED_CLUSTERS clusters: the watcher's pool
    has a thread for each of their sessions, and a session queued behind a full pool would
    outlive its lease."""
    now = timezone.now()
    clusters = list(watch.watchable_clusters().order_by("pk").values_list("pk", "name"))
    watched, unwatched = (
        clusters[: settings.ACCELPLANE_MAX_WATCHED_CLUSTERS],
        clusters[settings.ACCELPLANE_MAX_WATCHED_CLUSTERS :],
    )
    if unwatched:
        logger.warning(
            "not watching %s: ACCELPLANE_MAX_WATCHED_CLUSTERS is %d",
            ", ".join(name for _, name in unwatched),
            settings.ACCELPLANE_MAX_WATCHED_CLUSTERS,
        )
    for cluster_id, _ in watched:
        for resource in watch.WATCHED:
            if watch.claim(cluster_id, resource, now):
                watch_resource.delay(cluster_id, resource)


@celeryd_init.connect
def size_the_watcher(conf: Any, options: dict[str, Any], **_: Any) -> None:
    """The worker of the `watch` queue gets a thread per watch session it may run
    (watch.watcher_threads) unless its command line sets --concurrency: threads are started
    as sessions come, so the unused ones cost nothing."""
    if "watch" in (options.get("queues") or ()) and not options.get("concurrency"):
        conf.worker_concurrency = watch.watcher_threads()


@shared_task(bind=True, ignore_result=True, acks_late=True)
def watch_resource(self, cluster_id: int, resource: str) -> None:  # type: ignore[no-untyped-def]
    """One bounded watch session of a real cluster's Kueue Workloads, Pods or Nodes, then the
    next one, for as long as this worker holds the lease (renewed session by session).

    Routed to the `watch` queue (settings.CELERY_TASK_ROUTES): a session waits on the
    apiserver for minutes, so watches get a thread-pool worker of their own instead of
    holding the workers that admit and provision.
    """
    try:
        delay = watch.run_session(cluster_id, resource)
    except Exception:
        # The next beat starts the watch again, instead of it waiting out the lease.
        watch.release(cluster_id, resource)
        raise
    # Eager (embedded) runs would chain forever in one call stack; they watch once.
    if delay is None or self.request.is_eager:
        watch.release(cluster_id, resource)
        return
    watch.renew(cluster_id, resource, timezone.now(), delay)
    self.apply_async((cluster_id, resource), countdown=delay)
