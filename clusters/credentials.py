"""Credentials uploaded for a cluster (a service account key, a kubeconfig): checked, stored
encrypted, never shown again.

Encrypted with Fernet (AES-128-CBC + HMAC) under ACCELPLANE_ENCRYPTION_KEY, or, when that is
unset, a key derived from SECRET_KEY: a stolen database alone does not reveal them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import yaml
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from clusters import outbound

# What google-auth needs of a service account key (its own loader checks the same).
REQUIRED_FIELDS = ("client_email", "private_key", "token_uri")
# Where google-auth exchanges the key for a token: Google's, never a URL from the upload.
GOOGLE_TOKEN_URIS = frozenset(
    {"https://oauth2.googleapis.com/token", "https://accounts.google.com/o/oauth2/token"}
)
GOOGLE_UNIVERSE = "googleapis.com"
# The kubeconfig `gcloud container clusters get-credentials` writes authenticates with this
# plugin; Accelplane stands in for it with its own Google identity and never runs it.
GKE_AUTH_PLUGIN = "gke-gcloud-auth-plugin"
# Where the Google Cloud SDK installs it (apt, snap, Homebrew, the install script); any other
# path could be a program of the uploader's choosing, even if Accelplane never runs it.
GKE_AUTH_PLUGIN_PATH = re.compile(
    r"(/usr/lib/google-cloud-sdk/bin|/usr/bin|/usr/local/bin|/snap/bin"
    r"|/snap/google-cloud-cli/current/bin|/opt/homebrew/share/google-cloud-sdk/bin"
    r"|/usr/local/share/google-cloud-sdk/bin|(/home/[^/]+|/Users/[^/]+|/root)/google-cloud-sdk/bin)"
    rf"/{GKE_AUTH_PLUGIN}"
)
# Kubeconfig cluster fields that would send the workers' calls through another host, turn off
# certificate checks, or check the certificate against another name than the server's.
REDIRECTING_FIELDS = ("proxy-url", "insecure-skip-tls-verify", "tls-server-name")
# Kubeconfig fields that name files: on a worker they would read the worker's own files.
FILE_FIELDS = {
    "certificate-authority": "certificate-authority-data",
    "client-certificate": "client-certificate-data",
    "client-key": "client-key-data",
    "tokenFile": "token",
}


class CredentialError(ValueError):
    """An unusable key; the message names what is wrong, never the key's contents."""


def _fernet() -> Fernet:
    key = settings.ACCELPLANE_ENCRYPTION_KEY
    if not key:
        digest = hashlib.sha256(f"accelplane-credentials:{settings.SECRET_KEY}".encode()).digest()
        key = base64.urlsafe_b64encode(digest).decode()
    return Fernet(key)


def service_account_key(value: str | Mapping[str, Any]) -> dict[str, Any]:
    """The key as google-auth reads it, from its JSON text or parsed JSON."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise CredentialError("is not JSON: upload the key file gcloud created") from None
    if not isinstance(value, Mapping):
        raise CredentialError("must be a JSON object: a service account key file")
    if value.get("type") != "service_account":
        raise CredentialError('is not a service account key ("type" is not "service_account")')
    missing = [field for field in REQUIRED_FIELDS if not value.get(field)]
    if missing:
        raise CredentialError(f"lacks {', '.join(missing)}")
    token_uri = value["token_uri"]
    if not isinstance(token_uri, str) or token_uri not in GOOGLE_TOKEN_URIS:
        raise CredentialError(
            f"token_uri {str(token_uri)[:200]!r} is not Google's: expected "
            f"{' or '.join(sorted(GOOGLE_TOKEN_URIS))}"
        )
    if value.get("universe_domain", GOOGLE_UNIVERSE) != GOOGLE_UNIVERSE:
        raise CredentialError(f"universe_domain is not {GOOGLE_UNIVERSE}")
    return dict(value)


def kubeconfig(text: str | Mapping[str, Any]) -> dict[str, Any]:
    """The uploaded kubeconfig (its text, or a stored one) reduced to its current context: one
    cluster, one user.

    Refused: anything that would run a command (exec plugins other than GKE's, which is never
    run) or read a file on the worker, auth providers the Kubernetes client dropped, and a
    server the workers must not call (clusters.outbound) or reach through a proxy.
    """
    try:
        loaded = yaml.safe_load(text) if isinstance(text, str) else text
    except yaml.YAMLError:
        raise CredentialError("is not YAML: upload the file kubectl reads") from None
    if not isinstance(loaded, Mapping) or not loaded.get("current-context"):
        raise CredentialError("is not a kubeconfig with a current-context")
    context = _entry(loaded, "contexts", loaded["current-context"], "context")
    cluster = _entry(loaded, "clusters", context.get("cluster"), "cluster")
    user = _entry(loaded, "users", context.get("user"), "user")
    if not cluster.get("server"):
        raise CredentialError(f"cluster {context['cluster']!r} has no server")
    _check_server(context["cluster"], cluster)
    for name, fields in ((context["cluster"], cluster), (context["user"], user)):
        for field, embedded in FILE_FIELDS.items():
            if field in fields:
                raise CredentialError(
                    f"{field} of {name!r} names a file on your machine: embed it as {embedded}"
                )
    if "auth-provider" in user:
        raise CredentialError(
            f"user {context['user']!r} uses an auth-provider, which the Kubernetes client no "
            f"longer supports: use a token, a client certificate or {GKE_AUTH_PLUGIN}"
        )
    if "exec" in user:
        _check_exec(context["user"], user["exec"])
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": dict(cluster)}],
        "users": [{"name": "user", "user": dict(user)}],
        "contexts": [{"name": "context", "context": {"cluster": "cluster", "user": "user"}}],
        "current-context": "context",
    }


def _check_server(name: str, cluster: Mapping[str, Any]) -> None:
    for field in REDIRECTING_FIELDS:
        if field in cluster:
            raise CredentialError(
                f"{field} of {name!r} is not accepted: Accelplane calls the server directly "
                "and checks its certificate against its name (remove the field)"
            )
    try:
        outbound.check_server(str(cluster["server"]))
    except outbound.ForbiddenServer as error:
        raise CredentialError(f"server of {name!r}: {error}") from None


def _check_exec(user: str, plugin: Any) -> None:
    command = str(plugin.get("command", "")) if isinstance(plugin, Mapping) else ""
    if command == GKE_AUTH_PLUGIN or GKE_AUTH_PLUGIN_PATH.fullmatch(command):
        return
    if command.rsplit("/", 1)[-1] == GKE_AUTH_PLUGIN:
        raise CredentialError(
            f"user {user!r} runs {command[:200]}, not where the Google Cloud SDK installs "
            f"{GKE_AUTH_PLUGIN}: write `command: {GKE_AUTH_PLUGIN}`"
        )
    raise CredentialError(
        f"user {user!r} runs {command[:200] or 'a command'}: Accelplane never runs commands "
        f"from an uploaded kubeconfig ({GKE_AUTH_PLUGIN} alone is understood)"
    )


def _entry(loaded: Mapping[str, Any], section: str, name: Any, field: str) -> Mapping[str, Any]:
    for item in loaded.get(section) or []:
        if isinstance(item, Mapping) and item.get("name") == name:
            value = item.get(field)
            if isinstance(value, Mapping):
                return value
    raise CredentialError(f"{section} has no {field} named {name!r}")


def authenticates_with_google(config: Mapping[str, Any]) -> bool:
    """The kubeconfig's user is GKE's auth plugin: a Google token stands in for it."""
    return "exec" in config["users"][0]["user"]


def seal(key: Mapping[str, Any]) -> str:
    return _fernet().encrypt(json.dumps(key).encode()).decode()


def unseal(token: str) -> dict[str, Any] | None:
    """The stored credential, or None when there is none (for a key: Application Default
    Credentials)."""
    if not token:
        return None
    try:
        key: dict[str, Any] = json.loads(_fernet().decrypt(token.encode()))
    except InvalidToken:
        raise CredentialError(
            "the stored credentials cannot be decrypted: ACCELPLANE_ENCRYPTION_KEY "
            "(or SECRET_KEY) changed since it was uploaded; upload it again"
        ) from None
    return key
