"""Where ../shared (scenarios, seed manifests, CRD schemas) lives next to this checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"

requires_shared = pytest.mark.skipif(
    not SHARED.is_dir(),
    reason="../shared (scenarios, seed manifests, CRD schemas) is not next to this checkout; "
    "CI always has it",
)
