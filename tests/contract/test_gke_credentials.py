"""A cluster's own service account key: uploaded once, stored encrypted, never shown again,
and the identity its GKE client acts as."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from clusters import credentials
from clusters.models import Cluster
from clusters.services import provider_for
from events.models import Event
from teams import services as teams

pytestmark = pytest.mark.django_db

EMAIL = "deployer@acme-ml.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def key():
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return {
        "type": "service_account",
        "project_id": "acme-ml",
        "private_key_id": "abc123",
        "private_key": pem,
        "client_email": EMAIL,
        "token_uri": "https://oauth2.googleapis.com/token",
    }


@pytest.fixture
def admin(db):
    _, token = teams.issue_token(User.objects.create_user("root", is_staff=True))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def create(admin, django_capture_on_commit_callbacks, **fields):
    body = {"name": "llm-cluster", "provider": "gke", "project": "acme-ml", **fields}
    with django_capture_on_commit_callbacks(execute=False):  # no worker in this test
        return admin.post("/api/v1/clusters", body, format="json")


def test_an_uploaded_key_is_stored_encrypted_and_never_shown(
    admin, key, django_capture_on_commit_callbacks
):
    response = create(admin, django_capture_on_commit_callbacks, service_account_key=key)

    assert response.status_code == 201, response.json()
    assert "service_account_key" not in response.json()
    shown = admin.get(f"/api/v1/clusters/{response.json()['id']}").content.decode()
    stored = Cluster.objects.get().service_account_key
    assert key["private_key"].splitlines()[1] not in stored + shown
    assert credentials.unseal(stored) == key
    history = json.dumps(list(Event.objects.values_list("data", "message")))
    assert "private_key" not in history
    assert EMAIL not in history


def test_the_key_may_be_uploaded_as_the_files_text(admin, key, django_capture_on_commit_callbacks):
    text = json.dumps(key)
    response = create(admin, django_capture_on_commit_callbacks, service_account_key=text)

    assert response.status_code == 201, response.json()
    assert credentials.unseal(Cluster.objects.get().service_account_key) == key


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("not json", "is not JSON"),
        ({"type": "authorized_user"}, "is not a service account key"),
        ({"type": "service_account", "client_email": EMAIL}, "lacks private_key, token_uri"),
    ],
)
def test_a_key_that_is_not_a_service_account_key_is_refused_by_field(
    admin, value, problem, django_capture_on_commit_callbacks
):
    response = create(admin, django_capture_on_commit_callbacks, service_account_key=value)

    assert response.status_code == 400
    assert problem in response.json()["service_account_key"][0]
    assert not Cluster.objects.exists()


def test_the_gke_client_acts_as_the_clusters_own_key(settings, key):
    settings.ACCELPLANE_GKE_ENDPOINT = ""  # Google's endpoint: the key is what authenticates
    cluster = Cluster.objects.create(
        name="c", provider="gke", project="acme-ml", service_account_key=credentials.seal(key)
    )

    identity = provider_for(cluster)._client._transport._credentials

    assert identity.service_account_email == EMAIL


def test_a_key_sealed_under_another_secret_is_a_clear_error(settings, key):
    sealed = credentials.seal(key)
    settings.SECRET_KEY = "rotated"

    with pytest.raises(credentials.CredentialError, match="upload it again"):
        credentials.unseal(sealed)
