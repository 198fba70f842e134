"""Checkpoint lines of Hugging Face Trainer and Accelerate logs."""

from __future__ import annotations

import pytest

from workloads.kube.checkpoints import SavedCheckpoint, parse_line, parse_log


@pytest.mark.parametrize(
    ("line", "saved"),
    [
        (
            "Saving model checkpoint to /data/out/checkpoint-120",
            SavedCheckpoint(120, "/data/out/checkpoint-120"),
        ),
        (
            "[INFO|trainer.py:3984] 2025-01-01 12:00:00,000 >> "
            "Saving model checkpoint to gs://bucket/gemma/checkpoint-40",
            SavedCheckpoint(40, "gs://bucket/gemma/checkpoint-40"),
        ),
        (
            "INFO:accelerate.accelerator:Saving current state to /out/checkpoints/checkpoint_3",
            SavedCheckpoint(3, "/out/checkpoints/checkpoint_3"),
        ),
        (
            "Saving current state to /out/checkpoint-500/",
            SavedCheckpoint(500, "/out/checkpoint-500"),
        ),
    ],
)
def test_checkpoint_lines_give_step_and_path(line, saved):
    assert parse_line(line) == saved


@pytest.mark.parametrize(
    "line",
    [
        "{'loss': 1.23, 'learning_rate': 2e-05, 'epoch': 0.5}",
        "Saving model checkpoint to /data/out/final",
        "Saving model checkpoint to /data/out/checkpoint-12.tmp",
        "Loading checkpoint from /data/out/checkpoint-120",
    ],
)
def test_other_lines_are_not_checkpoints(line):
    assert parse_line(line) is None


def test_a_log_gives_its_checkpoints_in_order():
    log = [
        "Saving model checkpoint to /o/checkpoint-10",
        "{'loss': 1.0}",
        "Saving model checkpoint to /o/checkpoint-20",
    ]

    assert [s.step for s in parse_log(log)] == [10, 20]
