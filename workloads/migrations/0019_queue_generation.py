"""A stamp per cluster that every write to its queue objects renews, in the writer's
transaction (`QueueGeneration`), so that admission reads them again only when they changed.
Triggers, as for the nodes (clusters 0007): no writer (the ORM, bulk updates, raw SQL) can
miss it. Each stamp is new: a sequence on PostgreSQL, a random 64-bit number on SQLite."""

from django.db import migrations, models

from controlplane.vendor_sql import run_for_vendor

GENERATIONS = "workloads_queuegeneration"
STAMPS = "workloads_queue_stamps"
UPSERT = "ON CONFLICT (cluster_id) DO UPDATE SET generation = excluded.generation"
# What admission reads of a cluster (workloads.snapshot.queue_specs). Priority classes are
# read when a workload is submitted, not by admission.
TABLES = (
    "workloads_admissioncheck",
    "workloads_clusterqueue",
    "workloads_cohort",
    "workloads_configuration",
    "workloads_localqueue",
    "workloads_resourceflavor",
    "workloads_topology",
)
# (trigger name suffix, event, PostgreSQL transition tables, SQLite rows)
EVENTS = (
    ("inserts", "INSERT", "NEW TABLE AS new_rows", ("NEW",)),
    ("updates", "UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows", ("OLD", "NEW")),
    ("deletes", "DELETE", "OLD TABLE AS old_rows", ("OLD",)),
)


def _stamp_from(rows: str) -> str:
    return (
        f"INSERT INTO {GENERATIONS} (cluster_id, generation) "
        f"SELECT cluster_id, nextval('{STAMPS}') FROM (SELECT DISTINCT cluster_id FROM {rows}) c "
        f"{UPSERT};"
    )


# One statement trigger per table and event: one upsert per statement and cluster, however
# many rows a bulk write touches.
POSTGRESQL = [
    f"CREATE SEQUENCE {STAMPS}",
    f"""
    CREATE FUNCTION workloads_stamp_queue_writes() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'DELETE' THEN {_stamp_from("new_rows")} END IF;
        IF TG_OP <> 'INSERT' THEN {_stamp_from("old_rows")} END IF;
        RETURN NULL;
    END $$
    """,
    *(
        f"CREATE TRIGGER {table}_{suffix} AFTER {event} ON {table} "
        f"REFERENCING {transitions} FOR EACH STATEMENT "
        "EXECUTE FUNCTION workloads_stamp_queue_writes()"
        for table in TABLES
        for suffix, event, transitions, _ in EVENTS
    ),
]
POSTGRESQL_DROP = [
    *(f"DROP TRIGGER {table}_{suffix} ON {table}" for table in TABLES for suffix, *_ in EVENTS),
    "DROP FUNCTION workloads_stamp_queue_writes()",
    f"DROP SEQUENCE {STAMPS}",
]


def _sqlite_trigger(table: str, suffix: str, event: str, rows: tuple[str, ...]) -> str:
    stamps = " ".join(
        f"INSERT INTO {GENERATIONS} (cluster_id, generation) "
        f"VALUES ({row}.cluster_id, random()) {UPSERT};"
        for row in rows
    )
    return f"CREATE TRIGGER {table}_{suffix} AFTER {event} ON {table} BEGIN {stamps} END"


# SQLite drops a table's triggers when Django rebuilds the table to alter it: a later migration
# that alters one of these tables must create its triggers again
# (tests/unit/test_queue_generation.py fails if they are gone).
SQLITE = [
    _sqlite_trigger(table, suffix, event, rows)
    for table in TABLES
    for suffix, event, _, rows in EVENTS
]
SQLITE_DROP = [f"DROP TRIGGER {table}_{suffix}" for table in TABLES for suffix, *_ in EVENTS]


class Migration(migrations.Migration):
    dependencies = [("workloads", "0018_requeue_batch")]

    operations = [
        migrations.CreateModel(
            name="QueueGeneration",
            fields=[
                ("cluster_id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("generation", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(
            run_for_vendor({"postgresql": POSTGRESQL, "sqlite": SQLITE}),
            run_for_vendor({"postgresql": POSTGRESQL_DROP, "sqlite": SQLITE_DROP}),
        ),
    ]
