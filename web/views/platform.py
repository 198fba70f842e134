"""The platform as everyone sees it: overview, a cluster's nodes, the TPU map, the queues."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.utils import timezone

from clusters.models import Cluster, NodePool
from web import density, panels
from web.tpu import tpu_picture
from web.views.common import caller, chosen_cluster, cluster_named, page
from workloads.kube import connection
from workloads.models import LocalQueue


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
        history = density.usage_history(found, timezone.now(), accelerators)
        rows = [
            {
                "cluster": cluster,
                "pools": list(cluster.node_pools.all()),
                "accelerators": accelerators[cluster.pk],
                "history": history[cluster.pk],
            }
            for cluster in found
        ]
        return {"clusters": rows}

    def teams() -> dict[str, Any]:
        return {"teams": density.team_usage(scope)}

    return page(
        request,
        "web/overview.html",
        {"clusters": clusters, "teams": teams},
        {"events": panels.recent_events(scope), "skipped": " ".join(panels.FEED_SKIPS)},
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

    def utilisation() -> dict[str, Any]:
        totals = {cluster.pk: panels.accelerator_totals(cluster)}
        history = density.usage_history([cluster], timezone.now(), totals)[cluster.pk]
        groups = density.utilisation(cluster)
        tables = [("node pool", groups["pools"]), ("flavor", groups["flavors"])]
        return {"tables": tables, "history": history}

    def link() -> dict[str, Any]:
        return {"connection": connection.status(cluster, timezone.now())}

    parts = {"pools": pools, "utilisation": utilisation}
    if cluster.provider == "gke":  # a simulated cluster is its own apiserver
        parts["connection"] = link
    return page(request, "web/cluster.html", parts, {"cluster": cluster})


@login_required
def tpu_map(request: HttpRequest, name: str) -> HttpResponse:
    """The TPU topology picture: each 4x4x4 cube's layers of hosts, slices with their borders
    and tags, v5e pools as their chip grids (web/tpu.py)."""
    cluster = cluster_named(name)

    def tpu() -> dict[str, Any]:
        return {"picture": tpu_picture(cluster, caller(request))}

    return page(request, "web/tpu_map.html", {"tpu": tpu}, {"cluster": cluster})


@login_required
def queues(request: HttpRequest) -> HttpResponse:
    """Per ClusterQueue, flavor and resource: nominal, used, borrowed, lendable, pending;
    the LocalQueues the caller may see, each linking to its workloads in queue order."""
    cluster = chosen_cluster(request)

    def bars() -> dict[str, Any]:
        return {"cohorts": panels.queue_bars(cluster) if cluster else []}

    local_queues = LocalQueue.objects.filter(cluster=cluster).order_by("namespace", "name")
    context = {
        "cluster": cluster,
        "clusters": Cluster.objects.all(),
        "local_queues": caller(request).filter(local_queues) if cluster else [],
    }
    return page(request, "web/queues.html", {"bars": bars}, context)
