"""The platform as everyone sees it: overview, a cluster's nodes, the TPU map, the queues."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.templatetags.static import static

from clusters.models import Cluster, NodePool
from web import panels
from web.views.common import caller, chosen_cluster, cluster_named, page


def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico, which browsers and tools ask for whatever the page links: the SVG icon."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    """Clusters with their GPU and TPU totals, usage per team, and the live event feed."""
    scope = caller(request)

    def clusters() -> dict[str, Any]:
        found = list(Cluster.objects.prefetch_related("node_pools"))
        accelerators = panels.accelerator_totals_by_cluster(found)
        rows = [
            {
                "cluster": cluster,
                "pools": list(cluster.node_pools.all()),
                "accelerators": accelerators[cluster.pk],
            }
            for cluster in found
        ]
        return {"clusters": rows}

    def teams() -> dict[str, Any]:
        return {"teams": panels.team_usage(scope)}

    return page(
        request,
        "web/overview.html",
        {"clusters": clusters, "teams": teams},
        {"events": panels.recent_events(scope)},
    )


@login_required
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    """Node pools and nodes; per node its accelerators and the workloads using them."""
    cluster = cluster_named(name)

    def pools() -> dict[str, Any]:
        provisioning = NodePool.objects.filter(
            cluster=cluster, status__in=NodePool.IN_PROGRESS
        ).exists()
        return {
            "pools": panels.node_pools(cluster, caller(request)),
            "accelerators": panels.accelerator_totals(cluster),
            "provisioning": provisioning,
        }

    return page(request, "web/cluster.html", {"pools": pools}, {"cluster": cluster})


@login_required
def tpu_map(request: HttpRequest, name: str) -> HttpResponse:
    """Each 4x4x4 cube as a grid of hosts coloured by slice and workload; v5e hosts likewise."""
    cluster = cluster_named(name)

    def tpu() -> dict[str, Any]:
        return {"map": panels.tpu_map(cluster, caller(request))}

    return page(request, "web/tpu_map.html", {"tpu": tpu}, {"cluster": cluster})


@login_required
def queues(request: HttpRequest) -> HttpResponse:
    """Per ClusterQueue, flavor and resource: nominal, used, borrowed, lendable, pending."""
    cluster = chosen_cluster(request)

    def bars() -> dict[str, Any]:
        return {"cohorts": panels.queue_bars(cluster) if cluster else []}

    context = {"cluster": cluster, "clusters": Cluster.objects.all()}
    return page(request, "web/queues.html", {"bars": bars}, context)
