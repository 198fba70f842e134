"""Checkpoints from training logs: the lines Hugging Face Trainer and Accelerate print.

Trainer:    "Saving model checkpoint to /data/out/checkpoint-120"    (step 120)
Accelerate: "Saving current state to /data/out/checkpoints/checkpoint_3"
With Accelerate's automatic naming the number counts saves, not steps; it is recorded as
the step all the same, since it is the only number the line gives and it grows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from workloads.models import Checkpoint, Workload
from workloads.runtime import latest_checkpoint_step, record_checkpoint

SAVING = re.compile(
    r"Saving (?:model checkpoint|current state) to "
    r"(?P<path>\S*?checkpoint[-_](?P<step>\d+))(?![\w.-])"
)


@dataclass(frozen=True, slots=True)
class SavedCheckpoint:
    step: int
    path: str


def parse_line(line: str) -> SavedCheckpoint | None:
    match = SAVING.search(line)
    return SavedCheckpoint(int(match["step"]), match["path"]) if match else None


def parse_log(lines: Iterable[str]) -> list[SavedCheckpoint]:
    return [saved for line in lines if (saved := parse_line(line)) is not None]


def record_from_log(row: Workload, lines: Iterable[str], at: datetime) -> list[Checkpoint]:
    """Records the checkpoints newer than the owner's latest; a log read twice adds nothing."""
    latest = latest_checkpoint_step(row)
    recorded = []
    for saved in parse_log(lines):
        if saved.step > latest:
            recorded.append(record_checkpoint(row, saved.step, at, saved.path))
            latest = saved.step
    return recorded
