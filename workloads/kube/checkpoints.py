"""Checkpoints from training logs: the lines Hugging Face Trainer and Accelerate print.

Trainer:    "Saving model checkpoint to /data/out/checkpoint-120"    (step 120)
Accelerate: "Saving current state to /data/out/checkpoints/checkpoint_3"
With Accelerate's automatic naming the number counts saves, not steps; it is recorded as
the step all the same, since it is the only number the line gives and it grows.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from clusters.models import Cluster
from workloads import checkpoints
from workloads.kube.mirror import OWNER_LABELS
from workloads.models import Checkpoint, Workload
from workloads.runtime import TRAINING_KINDS

logger = logging.getLogger(__name__)

# The label the Job and JobSet controllers put on their pods, by owner kind.
POD_LABELS = {kind: OWNER_LABELS[kind] for kind in TRAINING_KINDS}

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
    recorded = []
    for saved in parse_log(lines):
        try:
            recorded.append(checkpoints.record(row, saved.step, at, saved.path))
        except checkpoints.NotNewer:
            continue
    return recorded


def collect(
    cluster: Cluster, api: client.ApiClient, at: datetime, since_seconds: int
) -> list[Checkpoint]:
    """Checkpoints in the last `since_seconds` of log of every running training pod on the
    cluster (Jobs and JobSets Accelplane submitted and Kueue admitted)."""
    core = client.CoreV1Api(api)
    rows = Workload.objects.filter(
        cluster=cluster, phase=Workload.Phase.ADMITTED, owner__kind__in=POD_LABELS
    ).select_related("owner")
    recorded: list[Checkpoint] = []
    for row in rows:
        selector = f"{POD_LABELS[row.owner.kind]}={row.owner.name}"
        try:
            pods = core.list_namespaced_pod(row.namespace, label_selector=selector).items
            for name in (pod.metadata.name for pod in pods if pod.metadata and pod.metadata.name):
                log = core.read_namespaced_pod_log(name, row.namespace, since_seconds=since_seconds)
                recorded += record_from_log(row, str(log).splitlines(), at)
        except ApiException as error:
            # A pod that is gone or not started yet has no log to read; the next session tries.
            logger.info("%s: no log for %s: %s", cluster.name, row.name, error.reason)
    return recorded
