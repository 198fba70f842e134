from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from api.metrics import metrics
from workloads import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("admin/", admin.site.urls),
    path("api/", include("api.urls")),
    path("metrics", metrics, name="metrics"),
]
