"""The event log, the busiest table to write, keeps the indexes its readers use: `cluster`'s
own goes (two indexes lead with it), and `namespace` loses PostgreSQL's LIKE index."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('events', '0004_event_object_at_index'),
    ]

    operations = [
        migrations.AlterField(
            model_name='event',
            name='cluster',
            field=models.CharField(blank=True, max_length=63),
        ),
        migrations.AlterField(
            model_name='event',
            name='namespace',
            field=models.CharField(blank=True, max_length=63),
        ),
        migrations.AddIndex(
            model_name='event',
            index=models.Index(fields=['namespace'], name='event_namespace_idx'),
        ),
    ]
