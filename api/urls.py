from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from api import events, platform, workloads
from api.schema import SchemaView

router = SimpleRouter()
router.trailing_slash = "/?"  # /api/v1/workloads, as documented, and with a slash too
router.register("workloads", workloads.WorkloadViewSet, basename="workload")
router.register("whatif", workloads.WhatIfViewSet, basename="whatif")
router.register("clusters", platform.ClusterViewSet, basename="cluster")
router.register("clusterqueues", platform.ClusterQueueViewSet, basename="clusterqueue")
for prefix, kind in (
    ("resourceflavors", "ResourceFlavor"),
    ("cohorts", "Cohort"),
    ("localqueues", "LocalQueue"),
    ("workloadpriorityclasses", "WorkloadPriorityClass"),
    ("priorityclasses", "PriorityClass"),
    ("topologies", "Topology"),
    ("admissionchecks", "AdmissionCheck"),
    ("configurations", "Configuration"),
):
    router.register(prefix, platform.queue_viewset(kind), basename=kind.lower())
router.register("teams", platform.TeamViewSet, basename="team")
router.register("tokens", platform.TokenViewSet, basename="token")

urlpatterns: list[URLPattern | URLResolver] = [
    path("v1/events", events.EventList.as_view(), name="events"),
    path("v1/me", platform.Me.as_view(), name="me"),
    path("schema/", SchemaView.as_view(), name="schema"),
    # Swagger UI with a way back to the web UI (templates/api/swagger_ui.html).
    path(
        "docs/",
        SpectacularSwaggerView.as_view(url_name="schema", template_name="api/swagger_ui.html"),
        name="docs",
    ),
]
urlpatterns.append(path("v1/", include(router.urls)))
