"""Service account keys uploaded for a cluster: checked, stored encrypted, never shown again.

Encrypted with Fernet (AES-128-CBC + HMAC) under ACCELPLANE_ENCRYPTION_KEY, or, when that is
unset, a key derived from SECRET_KEY: a stolen database alone does not reveal the keys.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

# What google-auth needs of a service account key (its own loader checks the same).
REQUIRED_FIELDS = ("client_email", "private_key", "token_uri")


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
    return dict(value)


def seal(key: Mapping[str, Any]) -> str:
    return _fernet().encrypt(json.dumps(key).encode()).decode()


def unseal(token: str) -> dict[str, Any] | None:
    """The stored key, or None when there is none (Application Default Credentials)."""
    if not token:
        return None
    try:
        key: dict[str, Any] = json.loads(_fernet().decrypt(token.encode()))
    except InvalidToken:
        raise CredentialError(
            "the stored service account key cannot be decrypted: ACCELPLANE_ENCRYPTION_KEY "
            "(or SECRET_KEY) changed since it was uploaded; upload it again"
        ) from None
    return key
