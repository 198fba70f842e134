"""A web process's heap: what it made while starting, kept out of the garbage collector's way."""

from __future__ import annotations

import gc

from django.urls import get_resolver


def freeze_startup_objects() -> None:
    """Import the views (the URL patterns) now rather than at the first request, then move
    every object made so far out of the cyclic garbage collector's reach (`gc.freeze`).

    A request leaves a few hundred objects in reference cycles (Django's request and DRF's
    view, serializers and fields refer to each other), so under load the oldest generation is
    collected every few seconds. Each collection walked the whole heap of modules, classes and
    URL patterns, 106-160 ms of CPU holding the interpreter while every other request of the
    process waited; frozen, 16-30 ms (`benchmarks/api_load.py`: its p99 was lower in 5 of 6
    alternating pairs of runs).
    The garbage there is already is collected first, so that none of it is kept for ever."""
    get_resolver().url_patterns  # noqa: B018  # imported for its side effect
    gc.collect()
    gc.freeze()
