"""A parked workload keeps the cluster's count of capacity releases instead of a flag that every
release cleared row by row (workloads/parking.py).

`Workload.parked` becomes `parked_release` (parked rows keep count 0, which no cluster has
passed yet), `WorkloadChange.parked` becomes `parked_release`, `WorkloadChangeLog` counts the
releases and `CapacityRelease` notes them. The update trigger of 0013 watches and notes the new
column: SQLite's three workload triggers are dropped before the columns change and made again
after; PostgreSQL's function is replaced once the new columns exist.
"""

from collections.abc import Callable
from importlib import import_module
from typing import Any

from django.db import migrations, models

import workloads.models

# 0013's watched columns but `parked`, cheapest and most likely to differ first.
OTHERS: tuple[str, ...] = import_module("workloads.migrations.0013_workload_change_parked").OTHERS
TABLE = "workloads_workloadchange"


def _postgresql_function(parked: str) -> str:
    """Notes the rows whose watched columns changed, with the new `parked` value when nothing
    else did."""
    watched = (OTHERS[0], parked, *OTHERS[1:])
    others_new = ", ".join(f"n.{c}" for c in OTHERS)
    others_old = ", ".join(f"o.{c}" for c in OTHERS)
    return f"""
    CREATE OR REPLACE FUNCTION workloads_note_updates() RETURNS trigger LANGUAGE plpgsql
    SET enable_nestloop = off AS $$
    BEGIN
        INSERT INTO {TABLE} (cluster_id, workload_id, {parked})
        SELECT n.cluster_id, n.id,
            CASE WHEN ({others_new}) IS NOT DISTINCT FROM ({others_old}) THEN n.{parked} END
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE ({", ".join(f"n.{c}" for c in watched)})
            IS DISTINCT FROM ({", ".join(f"o.{c}" for c in watched)});
        RETURN NULL;
    END $$
    """


def _sqlite_trigger(parked: str) -> str:
    watched = (OTHERS[0], parked, *OTHERS[1:])
    only_parked = " AND ".join(f"OLD.{c} IS NEW.{c}" for c in OTHERS)
    return f"""
    CREATE TRIGGER workload_updates AFTER UPDATE OF {", ".join(watched)} ON workloads_workload
    WHEN {" OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in watched)}
    BEGIN
        INSERT INTO {TABLE} (cluster_id, workload_id, {parked})
        VALUES (NEW.cluster_id, NEW.id, CASE WHEN {only_parked} THEN NEW.{parked} END);
    END
    """


_TRIGGERS = ("inserts", "deletes", "updates")


def _sqlite_triggers(parked: str) -> Callable[[Any, Any], None]:
    """SQLite: 0011's insert and delete triggers, and the update trigger noting `parked`."""

    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "sqlite":
            return
        created = import_module("workloads.migrations.0011_admission_cache")
        for statement in created.SQLITE[:2]:  # inserts, deletes
            schema_editor.execute(statement)
        schema_editor.execute(_sqlite_trigger(parked))

    return run


def _drop_sqlite_triggers(apps: Any, schema_editor: Any) -> None:
    """SQLite drops a table's triggers when Django rebuilds it (SQLite before 3.35.5 to drop a
    column, any to add one with a default), and refuses to drop a column a trigger names:
    gone while the columns change, made again after."""
    if schema_editor.connection.vendor == "sqlite":
        for name in _TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS workload_{name}")


def _postgresql_notes(parked: str) -> Callable[[Any, Any], None]:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(_postgresql_function(parked))

    return run


# Backwards: parked as the cluster's count of releases says (a release noted, not yet
# counted, counts), as workloads/parking.py reads it.
PARKED_NOW = """
UPDATE workloads_workload SET parked = (
    parked_release IS NOT NULL AND parked_release >= COALESCE(
        (SELECT l.releases FROM workloads_workloadchangelog l
         WHERE l.cluster_id = workloads_workload.cluster_id), 0)
    + CASE WHEN EXISTS (SELECT 1 FROM workloads_capacityrelease r
                        WHERE r.cluster_id = workloads_workload.cluster_id) THEN 1 ELSE 0 END
)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0016_admission_change_batches"),
    ]

    operations = [
        migrations.RunPython(_drop_sqlite_triggers, _sqlite_triggers("parked")),
        migrations.AlterField(
            model_name="workloadchangelog",
            name="token",
            field=models.CharField(default=workloads.models._new_token, max_length=32),
        ),
        migrations.AddField(
            model_name="workloadchangelog",
            name="releases",
            field=models.BigIntegerField(default=0),
        ),
        migrations.CreateModel(
            name="CapacityRelease",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("cluster_id", models.BigIntegerField(db_index=True)),
            ],
        ),
        migrations.AddField(
            model_name="workload",
            name="parked_release",
            field=models.BigIntegerField(
                blank=True,
                help_text="In Kueue's inadmissible set while the cluster's capacity releases "
                "(WorkloadChangeLog.releases) are still this many",
                null=True,
            ),
        ),
        migrations.RemoveField(model_name="workloadchange", name="parked"),
        migrations.AddField(
            model_name="workloadchange",
            name="parked_release",
            field=models.BigIntegerField(null=True),
        ),
        # Before a workload changes, while `parked` is still there (it names neither column).
        migrations.RunPython(_postgresql_notes("parked_release"), _postgresql_notes("parked")),
        migrations.RunSQL(
            "UPDATE workloads_workload SET parked_release = 0 WHERE parked", PARKED_NOW
        ),
        migrations.RemoveIndex(model_name="workload", name="workloads_w_cluster_d69b93_idx"),
        migrations.RemoveField(model_name="workload", name="parked"),
        migrations.RunPython(_sqlite_triggers("parked_release"), _drop_sqlite_triggers),
    ]
