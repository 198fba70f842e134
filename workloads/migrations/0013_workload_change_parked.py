"""Workload changes that only park or unpark a workload carry its new `parked` value, so the
admission cache flips it in memory instead of reading the row again (`WorkloadChange.parked`).

The update triggers of 0011 (SQLite) and 0012 (PostgreSQL) are replaced: the same rows are
noted, with `parked` set when every other watched column is unchanged, NULL otherwise.
"""

from collections.abc import Callable
from typing import Any

from django.db import migrations, models

# 0012's WATCHED, cheapest and most likely to differ first.
WATCHED = (
    "phase",
    "parked",
    "evicting",
    "preempting",
    "active",
    "pods_ready",
    "pending_reason",
    "quota_reserved_at",
    "requeue_at",
    "priority",
    "queued_at",
    "cluster_id",
    "queue_name",
    "namespace",
    "name",
    "pending_message",
    "admission",
    "pod_sets",
)
OTHERS = tuple(c for c in WATCHED if c != "parked")
TABLE = "workloads_workloadchange"


def _postgresql_function(note_parked: bool) -> str:
    if note_parked:
        columns, parked = (
            "(cluster_id, workload_id, parked)",
            (
                f", CASE WHEN ({', '.join(f'n.{c}' for c in OTHERS)}) IS NOT DISTINCT FROM "
                f"({', '.join(f'o.{c}' for c in OTHERS)}) THEN n.parked END"
            ),
        )
    else:
        columns, parked = "(cluster_id, workload_id)", ""
    return f"""
    CREATE OR REPLACE FUNCTION workloads_note_updates() RETURNS trigger LANGUAGE plpgsql
    SET enable_nestloop = off AS $$
    BEGIN
        INSERT INTO {TABLE} {columns}
        SELECT n.cluster_id, n.id{parked} FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE ({", ".join(f"n.{c}" for c in WATCHED)})
            IS DISTINCT FROM ({", ".join(f"o.{c}" for c in WATCHED)});
        RETURN NULL;
    END $$
    """


def _sqlite_trigger(note_parked: bool) -> str:
    if note_parked:
        only_parked = " AND ".join(f"OLD.{c} IS NEW.{c}" for c in OTHERS)
        columns = "(cluster_id, workload_id, parked)"
        values = f"NEW.cluster_id, NEW.id, CASE WHEN {only_parked} THEN NEW.parked END"
    else:
        columns, values = "(cluster_id, workload_id)", "NEW.cluster_id, NEW.id"
    return f"""
    CREATE TRIGGER workload_updates AFTER UPDATE OF {", ".join(WATCHED)} ON workloads_workload
    WHEN {" OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in WATCHED)}
    BEGIN INSERT INTO {TABLE} {columns} VALUES ({values}); END
    """


def _replace_triggers(note_parked: bool) -> Callable[[Any, Any], None]:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(_postgresql_function(note_parked))
        else:
            schema_editor.execute("DROP TRIGGER workload_updates")
            schema_editor.execute(_sqlite_trigger(note_parked))

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0012_workload_updates_hash_join"),
    ]

    operations = [
        migrations.AddField(
            model_name="workloadchange",
            name="parked",
            field=models.BooleanField(null=True),
        ),
        migrations.RunPython(_replace_triggers(True), _replace_triggers(False)),
    ]
