from __future__ import annotations

from celery import shared_task

from workloads import runtime


@shared_task(ignore_result=True)
def tick_clusters() -> None:
    """Live mode: move every running simulated cluster to the current wall time."""
    runtime.tick_live()
