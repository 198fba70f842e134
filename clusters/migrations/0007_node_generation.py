"""A count per cluster that every write to its nodes bumps, in the writer's transaction
(`NodeGeneration`): triggers, so that no writer (the ORM, bulk updates, raw SQL) can miss it."""

from django.db import migrations, models

GENERATIONS = "clusters_nodegeneration"
BUMP = f"ON CONFLICT (cluster_id) DO UPDATE SET generation = {GENERATIONS}.generation + 1"

POSTGRESQL = [
    # Statement triggers with transition tables: one upsert per statement and cluster, however
    # many nodes a bulk write touches.
    f"""
    CREATE FUNCTION clusters_count_node_writes() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'DELETE' THEN
            INSERT INTO {GENERATIONS} (cluster_id, generation)
            SELECT DISTINCT cluster_id, 1 FROM new_rows {BUMP};
        END IF;
        IF TG_OP <> 'INSERT' THEN
            INSERT INTO {GENERATIONS} (cluster_id, generation)
            SELECT DISTINCT cluster_id, 1 FROM old_rows {BUMP};
        END IF;
        RETURN NULL;
    END $$
    """,
    """
    CREATE TRIGGER node_inserts AFTER INSERT ON clusters_node
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION clusters_count_node_writes()
    """,
    """
    CREATE TRIGGER node_updates AFTER UPDATE ON clusters_node
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION clusters_count_node_writes()
    """,
    """
    CREATE TRIGGER node_deletes AFTER DELETE ON clusters_node
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION clusters_count_node_writes()
    """,
]
POSTGRESQL_DROP = [
    "DROP TRIGGER node_inserts ON clusters_node",
    "DROP TRIGGER node_updates ON clusters_node",
    "DROP TRIGGER node_deletes ON clusters_node",
    "DROP FUNCTION clusters_count_node_writes()",
]


def _sqlite_trigger(name: str, event: str, rows: tuple[str, ...]) -> str:
    bumps = " ".join(
        f"INSERT INTO {GENERATIONS} (cluster_id, generation) VALUES ({row}.cluster_id, 1) {BUMP};"
        for row in rows
    )
    return f"CREATE TRIGGER {name} AFTER {event} ON clusters_node BEGIN {bumps} END"


# SQLite drops a table's triggers when Django rebuilds the table to alter it: a later migration
# that alters clusters_node must create these again (tests/unit/test_snapshot.py fails if they
# are gone).
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


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for statement in statements_by_vendor[schema_editor.connection.vendor]:
            schema_editor.execute(statement)

    return run


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
            _run({"postgresql": POSTGRESQL, "sqlite": SQLITE}),
            _run({"postgresql": POSTGRESQL_DROP, "sqlite": SQLITE_DROP}),
        ),
    ]
