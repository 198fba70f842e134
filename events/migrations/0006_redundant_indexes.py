"""`kind` keeps one index instead of db_index's two on PostgreSQL (a plain one, and one with
pattern operators for LIKE): the pattern operators' serves equality too, as the audit log's
prefix. On SQLite, where db_index made one, it is renamed in effect. Dropped and created as
indexes alone: altering the field makes SQLite copy the whole log into a new table."""

from django.db import migrations, models

from controlplane.vendor_sql import run_for_vendor

KIND = "events_event_kind_6e85e911"  # Django's name for db_index's index


class Migration(migrations.Migration):

    dependencies = [
        ('events', '0005_event_indexes'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(
                    run_for_vendor(
                        {
                            "postgresql": [
                                f'DROP INDEX IF EXISTS "{KIND}"',
                                f'DROP INDEX IF EXISTS "{KIND}_like"',
                            ],
                            "sqlite": [f'DROP INDEX IF EXISTS "{KIND}"'],
                        }
                    ),
                    run_for_vendor(
                        {
                            "postgresql": [
                                f'CREATE INDEX "{KIND}" ON "events_event" ("kind")',
                                f'CREATE INDEX "{KIND}_like" ON "events_event" '
                                '("kind" varchar_pattern_ops)',
                            ],
                            "sqlite": [f'CREATE INDEX "{KIND}" ON "events_event" ("kind")'],
                        }
                    ),
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name='event',
                    name='kind',
                    field=models.CharField(max_length=64),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name='event',
            index=models.Index(fields=['kind'], name='event_kind_idx', opclasses=['varchar_pattern_ops']),
        ),
    ]
