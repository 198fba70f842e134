from __future__ import annotations

import logging

from celery import shared_task
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from clusters.models import Cluster
from workloads import admission
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

    def enqueue() -> None:
        try:
            if cache.add(_settle_queued(cluster.pk), True, timeout=SETTLE_QUEUED_SECONDS):
                settle_cluster.apply_async((cluster.pk,), countdown=SETTLE_DELAY_SECONDS)
        except (RedisError, OperationalError) as error:
            # The change is committed; the live tick admits it once Redis is back.
            logger.warning("admission of %s not queued: %s", cluster.name, error)

    transaction.on_commit(enqueue)


@shared_task(ignore_result=True)
def settle_cluster(cluster_id: int) -> None:
    """Admission and the simulated cluster at the current time, after API changes."""
    # Cleared before reading the cluster: a change committed from here on queues a new run.
    cache.delete(_settle_queued(cluster_id))
    cluster = Cluster.objects.filter(pk=cluster_id, status=Cluster.Status.RUNNING).first()
    if cluster is not None:
        admission.settle(cluster, timezone.now())


@shared_task(ignore_result=True)
def tick_clusters() -> None:
    """Live mode: move every running simulated cluster to the current wall time."""
    admission.tick_live()


@shared_task(ignore_result=True)
def watch_clusters() -> None:
    """Beat: a watch of each resource of every reachable GKE cluster that nobody is watching
    (its lease)."""
    now = timezone.now()
    for cluster_id in watch.watchable_clusters().values_list("pk", flat=True):
        for resource in watch.WATCHED:
            if watch.claim(cluster_id, resource, now):
                watch_resource.delay(cluster_id, resource)


@shared_task(bind=True, ignore_result=True, acks_late=True)
def watch_resource(self, cluster_id: int, resource: str) -> None:  # type: ignore[no-untyped-def]
    """One bounded watch session of a real cluster's Kueue Workloads, Pods or Nodes, then the
    next one, for as long as this worker holds the lease (renewed session by session).

    Routed to the `watch` queue (settings.CELERY_TASK_ROUTES): a session waits on the
    apiserver for minutes, so watches get a thread-pool worker of their own instead of
    holding the workers that admit and provision.
    """
    delay = watch.run_session(cluster_id, resource)
    # Eager (embedded) runs would chain forever in one call stack; they watch once.
    if delay is None or self.request.is_eager:
        watch.release(cluster_id, resource)
        return
    watch.renew(cluster_id, resource, timezone.now(), delay)
    self.apply_async((cluster_id, resource), countdown=delay)
