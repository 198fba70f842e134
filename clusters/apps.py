from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_delete


class ClustersConfig(AppConfig):
    name = "clusters"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from clusters.models import Cluster

        # Sent once the cluster's nodes are deleted too (a write that stamps its generation),
        # in its transaction.
        post_delete.connect(_forget_node_generation, sender=Cluster, dispatch_uid=__name__)


def _forget_node_generation(sender: Any, instance: Any, **kwargs: Any) -> None:
    from clusters.models import NodeGeneration

    NodeGeneration.objects.filter(cluster_id=instance.pk).delete()
