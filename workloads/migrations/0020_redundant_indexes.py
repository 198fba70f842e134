"""A workload's and a Kubernetes object's cluster, and a checkpoint's owner, lose their index
of their own: every read by them goes through an index that leads with them
(`unique_workload_name` and (cluster, phase); `unique_kube_object`; `unique_checkpoint_step`),
while every insert, and on PostgreSQL every update that changes an indexed column, wrote the
extra entry too.

Dropped as indexes alone, the foreign keys' state following: altering a foreign key makes
SQLite rebuild the table, which would drop the triggers that note workloads' changes
(0011, 0013)."""

import django.db.models.deletion
from django.db import migrations, models

# Django's names for the foreign keys' indexes (the same on both databases), by table and
# column.
INDEXES = {
    ("workloads_workload", "cluster_id"): "workloads_workload_cluster_id_878b3699",
    ("workloads_kubeobject", "cluster_id"): "workloads_kubeobject_cluster_id_a6afac36",
    ("workloads_checkpoint", "owner_id"): "workloads_checkpoint_owner_id_a94c153e",
}


class Migration(migrations.Migration):

    dependencies = [
        ('clusters', '0007_node_generation'),
        ('workloads', '0019_queue_generation'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{index}"',
                    f'CREATE INDEX "{index}" ON "{table}" ("{column}")',
                )
                for (table, column), index in INDEXES.items()
            ],
            state_operations=[
                migrations.AlterField(
                    model_name='checkpoint',
                    name='owner',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='workloads.kubeobject'),
                ),
                migrations.AlterField(
                    model_name='kubeobject',
                    name='cluster',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='kube_objects', to='clusters.cluster'),
                ),
                migrations.AlterField(
                    model_name='workload',
                    name='cluster',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='workloads', to='clusters.cluster'),
                ),
            ],
        ),
    ]
