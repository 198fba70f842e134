"""Checkpoints of training objects, one rule for every reporter (the simulator, training logs
on a real cluster in kube/checkpoints.py, a job calling the API): a step after the latest."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import connection, transaction

from controlplane import bulk
from workloads.history import workload_event
from workloads.models import Checkpoint, KubeObject, Workload


class CheckpointRefused(ValueError):
    """A checkpoint that cannot be recorded; the message says why."""


class NotNewer(CheckpointRefused):
    def __init__(self, step: int, latest: int):
        super().__init__(f"step {step} is not after the latest checkpoint (step {latest})")
        self.step, self.latest = step, latest


class NotRunning(CheckpointRefused):
    pass


def latest_step(row: Workload) -> int:
    """The owner's latest checkpoint step; 0 before any."""
    return latest_steps([row.owner_id]).get(row.owner_id, 0)


def latest_steps(owner_ids: Iterable[int]) -> dict[int, int]:
    """Owner pk -> its latest checkpoint step, for those with one: what every page, report
    and event says of checkpoints, so that no two of them can disagree."""
    keys = set(owner_ids)
    if not keys:
        return {}
    owners, param = bulk.key_table(keys, "bigint")
    quote = connection.ops.quote_name
    table, owner = quote(Checkpoint._meta.db_table), quote(_OWNER_COLUMN)
    # One index probe per owner ((owner, step) is unique), not a scan of all its checkpoints.
    # In SQL: every admission run asks, and the ORM took longer to build the query than the
    # database to answer it.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT k.value, (SELECT c.step FROM {table} c WHERE c.{owner} = k.value "  # noqa: S608
            f"ORDER BY c.step DESC LIMIT 1) FROM {owners}",
            [param],
        )
        return {pk: step for pk, step in cursor.fetchall() if step is not None}


_OWNER_COLUMN = Checkpoint._meta.get_field("owner").column


def record(row: Workload, step: int, at: datetime, path: str = "") -> Checkpoint:
    """Record the owner's checkpoint at `step`, saved by `row`; raises NotNewer unless `step`
    comes after the owner's latest."""
    path = path or f"checkpoint-{step}"
    with transaction.atomic():
        # Reporters of one owner take turns, so each checks against the other's step (the
        # unique (owner, step) constraint backs this up). NO KEY: rows referring to the owner
        # may still be inserted meanwhile. SQLite has no row locks, but its transactions begin
        # IMMEDIATE (settings): one writer at a time.
        owner = KubeObject.objects.select_for_update(no_key=True).filter(pk=row.owner_id)
        list(owner.values_list("pk"))
        latest = latest_step(row)
        if step <= latest:
            raise NotNewer(step, latest)
        checkpoint = Checkpoint.objects.create(
            owner_id=row.owner_id, workload=row, step=step, path=path, saved_at=at
        )
        workload_event(
            "checkpoint.saved",
            row,
            at,
            step=step,
            path=path,
            message=f"checkpoint saved at step {step} ({path})",
        )
    return checkpoint


def report(owner: KubeObject, step: int, at: datetime, path: str = "") -> Checkpoint:
    """A training job reports a checkpoint it saved: recorded on its running workload."""
    row = (
        owner.workloads.filter(phase=Workload.Phase.ADMITTED)
        .select_related("owner", "cluster")
        .first()
    )
    if row is None:
        raise NotRunning(f"{owner.key} is not running; only a running job saves checkpoints")
    return record(row, step, at, path)
