from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from api.metrics import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("api.urls")),
    path("metrics", metrics, name="metrics"),
    path("", include("web.urls")),
]
