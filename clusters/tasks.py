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


@shared_task(ignore_result=True)
def resume_provisioning() -> None:
    """Periodic safety net: drive every cluster and node pool still being provisioned."""
    for cluster_id in services.provisioning_cluster_ids():
        reconcile_cluster.delay(cluster_id)
    for pool_id in services.provisioning_node_pool_ids():
        reconcile_node_pool.delay(pool_id)
