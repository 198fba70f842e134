"""Admission decides the same with the cache as without it: Kueue's performance suites, run
small, give the same fingerprint (every admission, pod and event) both ways."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _fingerprint(suite: str, scale: str, cache: str) -> str:
    env = {**os.environ, "ACCELPLANE_ADMISSION_CACHE": cache}
    result = subprocess.run(
        [sys.executable, f"benchmarks/{suite}.py", "--scale", scale, "--fingerprint"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return re.search(r"^fingerprint\s+(\w+)$", result.stdout, re.MULTILINE)[1]


@pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")),
    reason="the suites make a SQLite database of their own: the SQLite pass runs this",
)
@pytest.mark.parametrize(("suite", "scale"), [("kueue_baseline", "0.03"), ("kueue_tas", "0.02")])
def test_the_suites_decide_the_same_with_and_without_the_cache(suite, scale):
    # "verify" also compares the cache with the database at every run, and fails on a difference.
    assert _fingerprint(suite, scale, "verify") == _fingerprint(suite, scale, "off")
