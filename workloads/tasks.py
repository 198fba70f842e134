from __future__ import annotations

from celery import shared_task

from workloads import runtime
from workloads.kube import watch


@shared_task(ignore_result=True)
def tick_clusters() -> None:
    """Live mode: move every running simulated cluster to the current wall time."""
    runtime.tick_live()


@shared_task(bind=True, ignore_result=True, acks_late=True)
def watch_kueue_workloads(self, cluster_id: int) -> None:  # type: ignore[no-untyped-def]
    """One bounded watch session of a real cluster's Kueue Workloads, then the next one."""
    delay = watch.run_session(cluster_id)
    # Eager (embedded) runs would chain forever in one call stack; they watch once.
    if delay is not None and not self.request.is_eager:
        self.apply_async((cluster_id,), countdown=delay)
