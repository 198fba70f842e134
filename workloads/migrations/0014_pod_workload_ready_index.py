"""Pods by workload and readiness (`pod_workload_ready_idx`): whether an admitted workload has
pods and whether they are all ready, read from the index alone. It replaces the index of the
`workload` foreign key, which it leads with."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0013_workload_change_parked"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="pod",
            index=models.Index(fields=["workload", "ready"], name="pod_workload_ready_idx"),
        ),
        migrations.AlterField(
            model_name="pod",
            name="workload",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="pods",
                to="workloads.workload",
            ),
        ),
    ]
