"""Where training code reads its checkpoint cadence, so the simulator can follow it.

The seeds' fine-tune (`fine-tune-l4.yaml`) sets CHECKPOINT_SAVE_STEPS in its container's
environment; Hugging Face Trainer scripts take `--save_steps N` (HfArgumentParser also accepts
`--save-steps` and `=N`) on their command line, often inside a `bash -c` string.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

CHECKPOINT_ENV = ("CHECKPOINT_SAVE_STEPS", "SAVE_STEPS")
_SAVE_STEPS_ARGUMENT = re.compile(r"--save[_-]steps(?:=|\s+)[\"']?(\d+)(?![\w.])")


def checkpoint_steps(body: Mapping[str, Any]) -> int | None:
    """Steps between checkpoints as the first container that says so says it: its command line
    (`--save_steps`), else its environment; None when none says, or only in a form the trainer
    would not take as a whole number of steps (a fraction, `$(VAR)`, a secret)."""
    for container in _containers(body):
        words = [
            w for key in ("command", "args") for w in container.get(key) or () if isinstance(w, str)
        ]
        found = _SAVE_STEPS_ARGUMENT.search(" ".join(words))
        if found and int(found.group(1)) > 0:
            return int(found.group(1))
        for variable in container.get("env") or ():
            if not isinstance(variable, Mapping) or variable.get("name") not in CHECKPOINT_ENV:
                continue
            value = variable.get("value")
            if isinstance(value, str) and value.strip().isdigit() and int(value) > 0:
                return int(value)
    return None


def _containers(node: Any) -> Iterator[Mapping[str, Any]]:
    """Every pod template's containers, wherever the kind nests its templates."""
    if isinstance(node, Mapping):
        containers = node.get("containers")
        if isinstance(containers, list):
            yield from (c for c in containers if isinstance(c, Mapping))
        for key, value in node.items():
            if key != "containers":
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)
