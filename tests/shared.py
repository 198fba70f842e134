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

# The GPU workflow (mix train and inference): its Kueue objects, in the order they apply.
GPU_SEED = SHARED / "seed-manifests" / "mix-train-and-inference" / "workloads"
GPU_SEED_FILES = (
    "flavors.yaml",
    "default-priorityclass.yaml",
    "high-priorityclass.yaml",
    "low-priorityclass.yaml",
    "cluster-queue.yaml",
    "local-queue.yaml",
)
GPU_SEED_PLACEHOLDERS = {
    "<MODEL_BUCKET>": "model-bucket-demo",
    "<PROJECT_ID>": "demo-project",
    "<REGION>": "us-central1",
}
