"""A release of capacity notes when it happened: Kueue requeues inadmissible workloads a batch
period after the first release it has not requeued yet (workloads/parking.py). Notes made
before this migration are dated at the epoch, so the next admission run counts them."""

from datetime import UTC, datetime

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("workloads", "0017_parking_by_release_count")]

    operations = [
        migrations.AddField(
            model_name="capacityrelease",
            name="at",
            field=models.DateTimeField(default=datetime(1970, 1, 1, tzinfo=UTC)),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="capacityrelease",
            name="cluster_id",
            field=models.BigIntegerField(),
        ),
        migrations.AddIndex(
            model_name="capacityrelease",
            index=models.Index(fields=["cluster_id", "at"], name="capacity_release_at_idx"),
        ),
    ]
