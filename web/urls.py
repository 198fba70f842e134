from __future__ import annotations

from django.contrib.auth import views as auth
from django.urls import path

from web.views import admin, events, kueue, platform, queues, workloads

app_name = "web"
urlpatterns = [
    path("", platform.overview, name="overview"),
    path("favicon.ico", platform.favicon, name="favicon"),
    path("login/", auth.LoginView.as_view(template_name="web/login.html"), name="login"),
    path("logout/", auth.LogoutView.as_view(next_page="web:login"), name="logout"),
    path("clusters/<slug:name>/", platform.cluster_detail, name="cluster"),
    path("clusters/<slug:name>/tpu/", platform.tpu_map, name="tpu-map"),
    path("clusters/<slug:name>/delete/", admin.delete_cluster, name="delete-cluster"),
    path("clusters/<slug:name>/nodepools/new/", admin.new_node_pool, name="new-node-pool"),
    path(
        "clusters/<slug:name>/nodepools/<slug:pool>/",
        admin.node_pool_action,
        name="node-pool-action",
    ),
    path(
        "clusters/<slug:name>/clusterqueues/<str:queue>/",
        queues.cluster_queue,
        name="cluster-queue",
    ),
    path(
        "clusters/<slug:name>/namespaces/<slug:namespace>/localqueues/<str:queue>/",
        queues.local_queue,
        name="local-queue",
    ),
    path("queues/", platform.queues, name="queues"),
    path("events/", events.event_list, name="events"),
    path("events/audit/", events.audit_list, name="audit"),
    path("workloads/", workloads.workload_list, name="workloads"),
    path("workloads/<int:pk>/", workloads.workload_detail, name="workload"),
    path("submit/", workloads.submit, name="submit"),
    path("platform/", admin.platform, name="platform"),
    path("platform/clusters/new/", admin.new_cluster, name="new-cluster"),
    path("platform/clusters/import/", admin.import_cluster, name="import-cluster"),
    path("platform/teams/new/", admin.new_team, name="new-team"),
    path("platform/kueue/<slug:kind>/new/", admin.new_kueue_object, name="new-kueue-object"),
]
# A Kueue object's admin pages: cluster-scoped kinds by name, LocalQueues by namespace too.
for suffix, view in (
    ("", kueue.kueue_object),
    ("edit/", kueue.edit_form),
    ("yaml/", kueue.edit_yaml),
    ("delete/", kueue.delete),
    ("adopt/", kueue.adopt),
):
    name = "kueue-object" + (f"-{suffix.rstrip('/')}" if suffix else "")
    urlpatterns += [
        path(f"clusters/<slug:name>/kueue/<slug:kind>/<str:obj>/{suffix}", view, name=name),
        path(
            f"clusters/<slug:name>/namespaces/<slug:namespace>/kueue/<slug:kind>/<str:obj>/{suffix}",
            view,
            name=f"{name}-namespaced",
        ),
    ]
