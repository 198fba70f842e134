"""An ApiClient for a cluster: from an uploaded kubeconfig, or from its endpoint and CA."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import google.auth
import google.auth.exceptions
import google.auth.transport.requests
from django.conf import settings
from google.oauth2 import service_account
from kubernetes import client, config

from clusters import credentials as cluster_credentials
from clusters.models import Cluster

GOOGLE_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


class KubeError(Exception):
    """A Kubernetes API call failed; the message names the object and the apiserver's reason."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def api_client(cluster: Cluster) -> client.ApiClient:
    try:
        if cluster.kubeconfig:
            kubeconfig = cluster_credentials.unseal(cluster.kubeconfig) or {}
            if not cluster_credentials.authenticates_with_google(kubeconfig):
                return from_kubeconfig(kubeconfig)
            server = kubeconfig["clusters"][0]["cluster"]
            return from_endpoint(
                server["server"], server.get("certificate-authority-data", ""), _token(cluster)
            )
        if not cluster.endpoint:
            raise KubeError(f"cluster {cluster.name} has no Kubernetes endpoint or kubeconfig yet")
        if cluster.endpoint.startswith("http://"):
            return from_endpoint(cluster.endpoint)
        return from_endpoint(cluster.endpoint, cluster.ca_certificate, _token(cluster))
    except cluster_credentials.CredentialError as error:
        raise KubeError(f"cluster {cluster.name}: {error}") from None


def _token(cluster: Cluster) -> str:
    try:
        return google_token(cluster_credentials.unseal(cluster.service_account_key))
    except google.auth.exceptions.GoogleAuthError as error:
        raise KubeError(f"cluster {cluster.name}: no Google token: {error}") from None


def from_kubeconfig(kubeconfig: Mapping[str, Any]) -> client.ApiClient:
    """`kubeconfig` as clusters.credentials.kubeconfig reduced it (nothing to run or read)."""
    try:
        # persist_config=False: never write refreshed tokens back anywhere.
        api: client.ApiClient = config.new_client_from_config_dict(  # type: ignore[no-untyped-call]
            dict(kubeconfig), persist_config=False
        )
        return api
    except config.ConfigException as error:
        # Name the problem, never echo the file: it may hold tokens.
        raise KubeError(f"the kubeconfig is not usable: {type(error).__name__}") from None


def from_endpoint(endpoint: str, ca_certificate: str = "", token: str = "") -> client.ApiClient:
    """A bare host is https; `ca_certificate` is base64 PEM, as GKE reports it."""
    cfg = client.Configuration()
    cfg.host = endpoint if "://" in endpoint else f"https://{endpoint}"
    if ca_certificate:
        # GKE reports masterAuth.clusterCaCertificate base64-encoded.
        cfg.ca_cert_data = base64.b64decode(ca_certificate).decode()
    if token:
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return client.ApiClient(cfg)


def google_token(key: Mapping[str, Any] | None = None) -> str:
    """An OAuth access token of the cluster's uploaded key, else of the workers' Google
    identity (GKE maps it to RBAC)."""
    path = settings.ACCELPLANE_GKE_CREDENTIALS_FILE
    if key:
        credentials = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
            key, scopes=GOOGLE_SCOPES
        )
    elif path:
        credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
            path, scopes=GOOGLE_SCOPES
        )
    else:
        credentials, _ = google.auth.default(scopes=GOOGLE_SCOPES)
    credentials.refresh(google.auth.transport.requests.Request())
    return str(credentials.token)
