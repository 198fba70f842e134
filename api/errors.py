"""Every refusal as JSON that names what is wrong; never a 500 for bad input."""

from __future__ import annotations

import logging
import math
from typing import Any

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.db import IntegrityError, OperationalError
from django.http import Http404
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from clusters.catalog import CatalogError
from controlplane.middleware import body_limit_detail
from teams.services import TeamError
from workloads.kube.client import KubeError
from workloads.manifests import ManifestError
from workloads.services import ManagedElsewhere, ObjectNotFound
from workloads.tenancy import SubmissionRefused

logger = logging.getLogger(__name__)


def manifest_error(error: ManifestError) -> dict[str, Any]:
    return {
        "detail": str(error),
        "source": error.source,
        "document": error.document,
        "object": error.object,
        "path": error.path,
        "value": error.value if _is_json(error.value) else repr(error.value),
    }


def _is_json(value: Any) -> bool:
    """Whether a value goes into the body as is; others as their repr (`nan`, `inf`, a set)."""
    if isinstance(value, float):
        return math.isfinite(value)  # JSON has no NaN or Infinity: the renderer would fail
    return value is None or isinstance(value, str | int | bool)


def kube_error(exc: KubeError) -> Response:
    if exc.conflicts:
        # Server-side apply: fields another manager owns; the admin decides, nothing is forced.
        return Response(
            {"detail": str(exc), "apiserver_status": exc.status, "conflicts": exc.conflicts},
            status=status.HTTP_409_CONFLICT,
        )
    if exc.status == 409:
        # A conflict with the cluster's state (e.g. the Kueue version it serves).
        return Response(
            {"detail": str(exc), "apiserver_status": exc.status}, status=status.HTTP_409_CONFLICT
        )
    # The cluster's apiserver refused (its 4xx: the request's fault) or could not be reached.
    refused = 400 <= exc.status < 500
    return Response(
        {"detail": str(exc), "apiserver_status": exc.status or None},
        status=status.HTTP_400_BAD_REQUEST if refused else status.HTTP_502_BAD_GATEWAY,
    )


def handle(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ManifestError):
        return Response(manifest_error(exc), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, RequestDataTooBig):  # DRF's JSON and form parsers read request.body
        return Response(
            {"detail": body_limit_detail()}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
        )
    if isinstance(exc, CatalogError):
        return Response(
            {"detail": str(exc), "field": exc.field}, status=status.HTTP_400_BAD_REQUEST
        )
    if isinstance(exc, KubeError):
        return kube_error(exc)
    if isinstance(exc, SubmissionRefused):
        return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, TeamError | ManagedElsewhere):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, ObjectNotFound | ObjectDoesNotExist | Http404):
        return Response({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, IntegrityError):
        return Response(
            {"detail": "conflicts with an existing object"}, status=status.HTTP_409_CONFLICT
        )
    if isinstance(exc, OperationalError):
        logger.warning("database unavailable: %s", exc)
        response = Response(
            {"detail": "the database is unavailable; retry shortly"},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
        response["Retry-After"] = "5"
        return response
    return exception_handler(exc, context)
