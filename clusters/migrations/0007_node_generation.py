"""A stamp per cluster that every write to its nodes changes, in the writer's transaction
(`NodeGeneration`): triggers, so that no writer (the ORM, bulk updates, raw SQL) can miss it.
Each stamp is new (a sequence on PostgreSQL, which no rollback takes back; a random 64-bit
number on SQLite): a count would come back after a rollback and stand for other nodes."""

from django.db import migrations, models

from controlplane.vendor_sql import run_for_vendor

GENERATIONS = "clusters_nodegeneration"
STAMPS = "clusters_node_stamps"
STAMP = "ON CONFLICT (cluster_id) DO UPDATE SET generation = excluded.generation"

POSTGRESQL = [
    f"CREATE SEQUENCE {STAMPS}",
    # Statement triggers with transition tables: one upsert per statement and cluster, however
    # many nodes a bulk write touches.
    f"""
    CREATE FUNCTION clusters_stamp_node_writes() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'DELETE' THEN
            INSERT INTO {GENERATIONS} (cluster_id, generation)
            SELECT cluster_id, nextval('{STAMPS}') FROM (SELECT DISTINCT cluster_id FROM new_rows) c
            {STAMP};
        END IF;
        IF TG_OP <> 'INSERT' THEN
            INSERT INTO {GENERATIONS} (cluster_id, generation)
            SELECT cluster_id, nextval('{STAMPS}') FROM (SELECT DISTINCT cluster_id FROM old_rows) c
            {STAMP};
        END IF;
        RETURN NULL;
    END $$
    """,
    """
    CREATE TRIGGER node_inserts AFTER INSERT ON clusters_node
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION clusters_stamp_node_writes()
    """,
    """
    CREATE TRIGGER node_updates AFTER UPDATE ON clusters_node
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION clusters_stamp_node_writes()
    """,
    """
    CREATE TRIGGER node_deletes AFTER DELETE ON clusters_node
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION clusters_stamp_node_writes()
    """,
]
POSTGRESQL_DROP = [
    "DROP TRIGGER node_inserts ON clusters_node",
    "DROP TRIGGER node_updates ON clusters_node",
    "DROP TRIGGER node_deletes ON clusters_node",
    "DROP FUNCTION clusters_stamp_node_writes()",
    f"DROP SEQUENCE {STAMPS}",
]


def _sqlite_trigger(name: str, event: str, rows: tuple[str, ...]) -> str:
    bumps = " ".join(
        f"INSERT INTO {GENERATIONS} (cluster_id, generation) "
        f"VALUES ({row}.cluster_id, random()) {STAMP};"
        for row in rows
    )
    return f"CREATE TRIGGER {name} AFTER {event} ON clusters_node BEGIN {bumps} END"


# SQLite drops a table's triggers when Django rebuilds the table to alter it: a later migration
# that alters clusters_node must create these again (tests/unit/test_tpu_admission.py fails if
# they are gone).
SQLITE = [
    _sqlite_trigger("node_inserts", "INSERT", ("NEW",)),
    _sqlite_trigger("node_updates", "UPDATE", ("OLD", "NEW")),
    _sqlite_trigger("node_deletes", "DELETE", ("OLD",)),
]
SQLITE_DROP = [
    "DROP TRIGGER node_inserts",
    "DROP TRIGGER node_updates",
    "DROP TRIGGER node_deletes",
]


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0006_imported_clusters"),
    ]

    operations = [
        migrations.CreateModel(
            name="NodeGeneration",
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
