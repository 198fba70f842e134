from __future__ import annotations

import gc
import os
from typing import Any

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("accelplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def freeze_startup_heap() -> None:
    """What a process has made by the time it is ready (modules, classes, Django's registries)
    lives as long as it does: moved out of the cyclic collector's sight, so that a full
    collection in a busy worker walks what it made since, not that too. Half of each full
    collection in Kueue's TAS suite was that heap. Garbage cycles are collected first, not
    kept; frozen objects are still freed by reference counting."""
    gc.collect()
    gc.freeze()


@worker_ready.connect
def _worker_ready(**_: Any) -> None:
    # The worker runs its tasks in this process (--pool=solo, controlplane/run.py).
    freeze_startup_heap()
