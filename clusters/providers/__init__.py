"""Providers by name, imported lazily so that `sim` never imports Google libraries."""

from __future__ import annotations

from importlib import import_module

from django.conf import settings

from clusters.providers.base import Provider, ProviderError

PROVIDERS = {"sim": "clusters.providers.sim.SimProvider"}


def get_provider(name: str) -> Provider:
    if name not in PROVIDERS:
        raise ProviderError(f"provider {name!r} is not available", permanent=True)
    module_name, class_name = PROVIDERS[name].rsplit(".", 1)
    provider_class = getattr(import_module(module_name), class_name)
    if name == "sim":
        return provider_class(settings.ACCELPLANE_SIM_OPERATION_SECONDS)  # type: ignore[no-any-return]
    return provider_class()  # type: ignore[no-any-return]


__all__ = ["PROVIDERS", "Provider", "ProviderError", "get_provider"]
