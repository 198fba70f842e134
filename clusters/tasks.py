from __future__ import annotations

from celery import shared_task

from clusters import services


@shared_task(bind=True, acks_late=True, max_retries=None)
def reconcile_cluster(self, cluster_id: int) -> None:  # type: ignore[no-untyped-def]
    progress = services.reconcile_cluster(cluster_id)
    if not progress.done:
        raise self.retry(countdown=progress.retry_after)


@shared_task(bind=True, acks_late=True, max_retries=None)
def reconcile_node_pool(self, pool_id: int) -> None:  # type: ignore[no-untyped-def]
    progress = services.reconcile_node_pool(pool_id)
    if not progress.done:
        raise self.retry(countdown=progress.retry_after)
