from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from clusters.models import Cluster
from workloads import status
from workloads.models import KubeObject


def overview(request: HttpRequest) -> HttpResponse:
    """Clusters with node pools, queues with quota and usage, workloads with their phase."""
    clusters = []
    for cluster in Cluster.objects.prefetch_related("node_pools__nodes"):
        queues = status.queue_rows(cluster)
        objects = [
            {"object": obj, **status.object_status(obj)}
            for obj in KubeObject.objects.filter(cluster=cluster, kind__in=status.WORKLOAD_KINDS)
        ]
        clusters.append({"cluster": cluster, "queues": queues, "objects": objects})
    return render(request, "workloads/overview.html", {"clusters": clusters})
