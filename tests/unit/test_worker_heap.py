"""A ready worker keeps its start-up heap out of the cyclic collector's full collections."""

from __future__ import annotations

import gc
import weakref

import pytest
from celery.signals import worker_ready

from controlplane.celery import app


class _Node:
    def __init__(self) -> None:
        self.itself = self


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_ready_worker_freezes_what_it_made_at_start_up_but_not_its_garbage(unfrozen):
    garbage = _Node()  # a reference cycle: only the cyclic collector frees it
    freed = weakref.ref(garbage)
    del garbage
    gc.disable()  # no collection by chance meanwhile
    try:
        worker_ready.send(sender=app)
    finally:
        gc.enable()

    assert gc.get_freeze_count() > 1000  # modules, classes, Django's registries
    assert freed() is None  # collected first, not frozen for the life of the process
