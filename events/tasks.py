from __future__ import annotations

from celery import shared_task

from events import services


@shared_task(ignore_result=True)
def number_events() -> None:
    """Beat's safety net: events whose writer stopped between its commit and numbering them
    are numbered and published (readers would number them too, when they next read)."""
    services.number_events()
