"""A benchmark's scratch directory is gone once the benchmark exits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_benchmarks_scratch_directory_is_removed_when_it_exits():
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pathlib import Path; from benchmarks.scratch import scratch_dir; "
            "d = Path(scratch_dir()); (d / 'db.sqlite3').write_text('x'); print(d)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert made.startswith("/")
    assert not Path(made).exists()
