"""Workloads parked again after a requeue are noted in one `ParkedSet` a run, and one change
that names it, instead of an update of each row and a change each (workloads/parking.py).

`WorkloadChange.workload_id` becomes nullable: SQLite rebuilds the table, which the workload
triggers write to, so they are dropped around it and made again as 0017 made them.
"""

from importlib import import_module

from django.db import migrations, models


_TRIGGERS = import_module("workloads.migrations.0017_parking_by_release_count")


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0019_queue_generation"),
    ]

    operations = [
        migrations.RunPython(
            _TRIGGERS._drop_sqlite_triggers, _TRIGGERS._sqlite_triggers("parked_release")
        ),
        migrations.AddField(
            model_name="workloadchange",
            name="parked_set",
            field=models.BigIntegerField(null=True),
        ),
        migrations.AlterField(
            model_name="workload",
            name="parked_release",
            field=models.BigIntegerField(
                blank=True,
                help_text="In Kueue's inadmissible set while the cluster's capacity releases (WorkloadChangeLog.releases) are still this many, or while a ParkedSet of their count lists it; none: not parked, whatever a ParkedSet lists",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="workloadchange",
            name="workload_id",
            field=models.BigIntegerField(null=True),
        ),
        # Backwards, a parked set's changes go first: their workload_id is NULL. Their
        # workloads are back in their queues, as after a release.
        migrations.RunSQL(
            migrations.RunSQL.noop,
            "DELETE FROM workloads_workloadchange WHERE workload_id IS NULL",
        ),
        migrations.RunPython(
            _TRIGGERS._sqlite_triggers("parked_release"), _TRIGGERS._drop_sqlite_triggers
        ),
        migrations.CreateModel(
            name="ParkedSet",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("cluster_id", models.BigIntegerField()),
                ("release", models.BigIntegerField()),
                ("workloads", models.JSONField()),
            ],
            options={
                "indexes": [
                    models.Index(fields=["cluster_id", "release"], name="parked_set_release_idx")
                ],
            },
        ),
    ]
