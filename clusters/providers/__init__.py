"""Providers by name, imported lazily so that `sim` never imports Google libraries."""

from __future__ import annotations

import json
from importlib import import_module
from typing import Any

from django.conf import settings

from clusters.providers.base import Provider, ProviderError

PROVIDERS = {
    "sim": "clusters.providers.sim.SimProvider",
    "gke": "clusters.providers.gke.GkeProvider",
}


def get_provider(name: str, credentials_info: dict[str, Any] | None = None) -> Provider:
    """`credentials_info`: a cluster's own service account key; None: the workers' identity."""
    if name not in PROVIDERS:
        raise ProviderError(f"provider {name!r} is not available", permanent=True)
    module_name, class_name = PROVIDERS[name].rsplit(".", 1)
    provider_class = getattr(import_module(module_name), class_name)
    if name == "sim":
        return provider_class(settings.ACCELPLANE_SIM_OPERATION_SECONDS)  # type: ignore[no-any-return]
    return provider_class(  # type: ignore[no-any-return]
        api_endpoint=settings.ACCELPLANE_GKE_ENDPOINT,
        credentials_info=credentials_info
        or _service_account_key(settings.ACCELPLANE_GKE_CREDENTIALS_FILE),
    )


def _service_account_key(path: str) -> dict[str, Any] | None:
    """The key file's JSON, or None to use Application Default Credentials."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as key_file:
            return dict(json.load(key_file))
    except (OSError, ValueError) as error:
        # Name the file, never its contents.
        raise ProviderError(
            f"ACCELPLANE_GKE_CREDENTIALS_FILE {path}: not a readable service account key "
            f"({type(error).__name__})",
            permanent=True,
        ) from None


__all__ = ["PROVIDERS", "Provider", "ProviderError", "get_provider"]
