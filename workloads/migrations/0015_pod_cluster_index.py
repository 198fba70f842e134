"""A pod's `cluster` key loses its own index: `unique_pod` and (cluster, phase, node) lead with
it, and every pod insert and bind paid for it."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('clusters', '0007_node_generation'),
        ('workloads', '0014_pod_workload_ready_index'),
    ]

    operations = [
        migrations.AlterField(
            model_name='pod',
            name='cluster',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='pods', to='clusters.cluster'),
        ),
    ]
