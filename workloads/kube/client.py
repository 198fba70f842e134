"""An ApiClient for a cluster: from an uploaded kubeconfig, or from its endpoint and CA.

Every client only connects where clusters.outbound allows: the server is checked before the
client is built and each connection's address once it is made, before anything is sent.
"""

from __future__ import annotations

import base64
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import google.auth
import google.auth.exceptions
import google.auth.transport.requests
import urllib3
from django.conf import settings
from google.oauth2 import service_account
from kubernetes import client, config
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import NewConnectionError

from clusters import credentials as cluster_credentials
from clusters import outbound
from clusters.models import Cluster

GOOGLE_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


class KubeError(Exception):
    """A Kubernetes API call failed; the message names the object and the apiserver's reason.
    `conflicts`: a server-side apply's fields owned by another manager ({manager, field})."""

    def __init__(
        self, message: str, *, status: int = 0, conflicts: list[dict[str, str]] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.conflicts = conflicts or []


def api_client(cluster: Cluster) -> client.ApiClient:
    try:
        if cluster.kubeconfig:
            # Checked again: a row stored before today's rules, or written around the API.
            stored = cluster_credentials.unseal(cluster.kubeconfig) or {}
            kubeconfig = cluster_credentials.kubeconfig(stored)
            if not cluster_credentials.authenticates_with_google(kubeconfig):
                return from_kubeconfig(kubeconfig)
            server = kubeconfig["clusters"][0]["cluster"]
            _check_token_target(cluster, server["server"])
            return from_endpoint(
                server["server"], server.get("certificate-authority-data", ""), _token(cluster)
            )
        if not cluster.endpoint:
            raise KubeError(f"cluster {cluster.name} has no Kubernetes endpoint or kubeconfig yet")
        if cluster.endpoint.startswith("http://"):
            return from_endpoint(cluster.endpoint)
        _check_token_target(cluster, cluster.endpoint)
        return from_endpoint(cluster.endpoint, cluster.ca_certificate, _token(cluster))
    except cluster_credentials.CredentialError as error:
        raise KubeError(f"cluster {cluster.name}: {error}") from None


def _check_token_target(cluster: Cluster, server: str) -> None:
    """A Google token goes to the endpoint GKE reports for this cluster only (never to a
    kubeconfig's server of the uploader's choosing), over https, where clusters.outbound
    allows: checked before a token is even made."""
    origin = _origin(server)
    if origin[0] != "https":
        raise KubeError(f"cluster {cluster.name}: a Google token is sent over https only")
    if not cluster.endpoint or origin != _origin(cluster.endpoint):
        raise KubeError(
            f"cluster {cluster.name}: its kubeconfig's server {server} is not the endpoint GKE "
            f"reports for it ({cluster.endpoint or 'none yet'}); Accelplane sends its Google "
            "token there only (use a token or client certificate for another server)"
        )
    try:
        outbound.check_server(server if "://" in server else f"https://{server}")
    except outbound.ForbiddenServer as error:
        raise KubeError(f"cluster {cluster.name}: the Kubernetes API server {error}") from None


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url if "://" in url else f"https://{url}")
    try:
        port = parts.port or 443
    except ValueError:
        port = -1
    return parts.scheme, (parts.hostname or "").rstrip("."), port


def _token(cluster: Cluster) -> str:
    try:
        key = cluster_credentials.unseal(cluster.service_account_key)
        return google_token(cluster_credentials.service_account_key(key) if key else None)
    except google.auth.exceptions.GoogleAuthError as error:
        raise KubeError(f"cluster {cluster.name}: no Google token: {error}") from None


def from_kubeconfig(kubeconfig: Mapping[str, Any]) -> client.ApiClient:
    """`kubeconfig` as clusters.credentials.kubeconfig reduced it (nothing to run or read)."""
    try:
        # persist_config=False: never write refreshed tokens back anywhere.
        api: client.ApiClient = config.new_client_from_config_dict(  # type: ignore[no-untyped-call]
            dict(kubeconfig), persist_config=False
        )
        return _checking_connections(api)
    except config.ConfigException as error:
        # Name the problem, never echo the file: it may hold tokens.
        raise KubeError(f"the kubeconfig is not usable: {type(error).__name__}") from None


def from_endpoint(endpoint: str, ca_certificate: str = "", token: str = "") -> client.ApiClient:
    """A bare host is https; `ca_certificate` is base64 PEM, as GKE reports it."""
    cfg = client.Configuration()
    cfg.host = endpoint if "://" in endpoint else f"https://{endpoint}"
    try:
        outbound.check_server(cfg.host)
    except outbound.ForbiddenServer as error:
        raise KubeError(f"the Kubernetes API server {error}") from None
    if token and not cfg.host.startswith("https://"):
        raise KubeError(f"{cfg.host}: a token is never sent over plain http")
    if ca_certificate:
        # GKE reports masterAuth.clusterCaCertificate base64-encoded.
        cfg.ca_cert_data = base64.b64decode(ca_certificate).decode()
    if token:
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return _checking_connections(client.ApiClient(cfg))


def _checking_connections(api: client.ApiClient) -> client.ApiClient:
    """Each connection's address is checked once made (a name may resolve elsewhere by now).
    Through a proxy from the environment the peer is the proxy: the server was checked
    before the client was built."""
    pool_manager = api.rest_client.pool_manager
    if type(pool_manager) is urllib3.PoolManager:
        pool_manager.pool_classes_by_scheme = {"http": _CheckedPool, "https": _CheckedTlsPool}
    return api


def _checked(connection: HTTPConnection, sock: socket.socket) -> socket.socket:
    try:
        outbound.check_address(str(sock.getpeername()[0]), connection.host)
    except outbound.ForbiddenServer as error:
        sock.close()
        raise NewConnectionError(connection, f"refused: {error}") from None
    return sock


class _CheckedConnection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        return _checked(self, super()._new_conn())


class _CheckedTlsConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        return _checked(self, super()._new_conn())


class _CheckedPool(HTTPConnectionPool):
    ConnectionCls = _CheckedConnection


class _CheckedTlsPool(HTTPSConnectionPool):
    ConnectionCls = _CheckedTlsConnection


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
