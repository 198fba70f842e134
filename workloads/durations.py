"""Durations as scenarios and annotations write them: 90s, 10m, 2h, 1h30m, or seconds."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_DURATION_CHARS = 64
"""Longer than any duration a person writes. A longer one is refused before it is parsed: a
pattern of digits and units backtracks over a long run of digits, quadratic in its length."""


def parse_duration(value: object) -> float:
    """Seconds; raises ValueError naming the value when it is not a duration."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{value!r} is not a duration")
        return float(value)
    text = str(value).strip()
    if len(text) > MAX_DURATION_CHARS:
        raise ValueError(f"a duration has at most {MAX_DURATION_CHARS} characters")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{value!r} is not a duration (examples: 90s, 10m, 2h, 1h30m)")
    return sum(float(number) * _UNITS[unit] for number, unit in parts)
