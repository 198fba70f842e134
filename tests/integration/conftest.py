"""Integration tests run against real PostgreSQL and Redis, or not at all.

CI sets DATABASE_URL=postgres://postgres@127.0.0.1:5432/test and REDIS_URL=redis://127.0.0.1:6379/0;
without both, every test in this folder is skipped (the embedded SQLite mode cannot show
advisory locks, a Redis broker or the Redis channel layer).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.workers import Workers

HERE = Path(__file__).resolve().parent


def missing_stack() -> str:
    """Why the full stack is not available, or "" when it is."""
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        return "integration tests need PostgreSQL: set DATABASE_URL=postgres://... (CI does)"
    if not os.environ.get("REDIS_URL"):
        return "integration tests need Redis: set REDIS_URL=redis://... (CI does)"
    return ""


def pytest_collection_modifyitems(config, items):
    reason = missing_stack()
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def start_worker(transactional_db, tmp_path):
    """Start Celery workers on the test database; all are stopped before the database is reset."""
    workers = Workers(tmp_path, {"ACCELPLANE_SIM_OPERATION_SECONDS": "1"})
    yield workers
    workers.stop()
