"""A web server's process starts with what it imported out of the garbage collector's way
(controlplane/heap.py): collections of the oldest generation then walk what requests made since,
not the whole heap, while every other request of the process waits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COUNT = "import gc, {module}; print(gc.get_freeze_count(), len(gc.get_objects()))"


@pytest.mark.parametrize("module", ["controlplane.wsgi", "controlplane.asgi"])
def test_a_web_process_starts_with_its_objects_frozen(module):
    env = {**os.environ, "DATABASE_URL": "", "REDIS_URL": ""}
    started = subprocess.run(
        [sys.executable, "-c", COUNT.format(module=module)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    frozen, tracked = map(int, started.stdout.split())
    assert frozen > 100_000  # Django's, DRF's and our modules, classes and URL patterns
    assert tracked < 1_000  # what the import made after it froze them
