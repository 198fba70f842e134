"""A benchmark's scratch directory (its SQLite database, static files, generated keys), removed
when the benchmark exits: a suite's database is tens of megabytes, and every run made one."""

from __future__ import annotations

import atexit
import shutil
import tempfile


def scratch_dir() -> str:
    path = tempfile.mkdtemp(prefix="accelplane-bench-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
