"""Which cluster a submission is for when the request does not say: the one that holds the
LocalQueues its manifests name (docs/api.md, "Which cluster")."""

from __future__ import annotations

from dataclasses import dataclass

from clusters.models import Cluster
from workloads.manifests import load_documents, workload_shape
from workloads.models import LocalQueue


@dataclass(frozen=True, slots=True)
class ClusterChoice:
    queues: tuple[str, ...]
    """The LocalQueues the manifests name, as namespace/name."""
    clusters: tuple[Cluster, ...]
    """The clusters that hold every one of them, by name."""


def clusters_holding_queues(text: str, *, source: str, namespace: str | None) -> ClusterChoice:
    """The clusters holding every LocalQueue the manifests' workloads are labelled with; raises
    ManifestError for a manifest that apply would refuse anyway."""
    named: set[tuple[str, str]] = set()
    for doc in load_documents(text, source=source, default_namespace=namespace):
        shape = workload_shape(doc)
        if shape is not None and shape.queue_name:
            named.add((doc.namespace or "default", shape.queue_name))
    holders: dict[int, set[tuple[str, str]]] = {}
    rows = LocalQueue.objects.filter(name__in={name for _, name in named})
    for cluster_id, queue_namespace, name in rows.values_list("cluster_id", "namespace", "name"):
        if (queue_namespace, name) in named:
            holders.setdefault(cluster_id, set()).add((queue_namespace, name))
    complete = [pk for pk, held in holders.items() if held == named]
    clusters = Cluster.objects.filter(pk__in=complete).order_by("name") if named else []
    return ClusterChoice(
        queues=tuple(f"{ns}/{name}" for ns, name in sorted(named)), clusters=tuple(clusters)
    )
