from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_delete


class WorkloadsConfig(AppConfig):
    name = "workloads"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from clusters.models import Cluster

        # Sent once the cluster's workloads and queues are deleted too (they go first), in its
        # transaction.
        post_delete.connect(_forget_cluster, sender=Cluster, dispatch_uid=__name__)


def _forget_cluster(sender: Any, instance: Any, **kwargs: Any) -> None:
    from workloads import admission_cache, snapshot

    admission_cache.forget_cluster(instance.pk)
    snapshot.forget_cluster(instance.pk)
