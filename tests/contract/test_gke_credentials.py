"""A cluster's own service account key: uploaded once, stored encrypted, never shown again,
and the identity its GKE client acts as."""

from __future__ import annotations

import base64
import json

import pytest
import yaml
from cryptography.fernet import Fernet

from clusters import credentials
from clusters.models import Cluster
from clusters.services import provider_for
from events.models import Event
from workloads.kube import apply as kube
from workloads.kube import client as kube_client
from workloads.kube.client import api_client

pytestmark = pytest.mark.django_db

EMAIL = "deployer@acme-ml.iam.gserviceaccount.com"


def create(staff_api, django_capture_on_commit_callbacks, **fields):
    body = {"name": "llm-cluster", "provider": "gke", "project": "acme-ml", **fields}
    with django_capture_on_commit_callbacks(execute=False):  # no worker in this test
        return staff_api.post("/api/v1/clusters", body, format="json")


def test_an_uploaded_key_is_stored_encrypted_and_never_shown(
    staff_api, sa_key, django_capture_on_commit_callbacks
):
    response = create(staff_api, django_capture_on_commit_callbacks, service_account_key=sa_key)

    assert response.status_code == 201, response.json()
    assert "service_account_key" not in response.json()
    shown = staff_api.get(f"/api/v1/clusters/{response.json()['id']}").content.decode()
    stored = Cluster.objects.get().service_account_key
    assert sa_key["private_key"].splitlines()[1] not in stored + shown
    assert credentials.unseal(stored) == sa_key
    history = json.dumps(list(Event.objects.values_list("data", "message")))
    assert "private_key" not in history
    assert EMAIL not in history


def test_the_key_may_be_uploaded_as_the_files_text(
    staff_api, sa_key, django_capture_on_commit_callbacks
):
    text = json.dumps(sa_key)
    response = create(staff_api, django_capture_on_commit_callbacks, service_account_key=text)

    assert response.status_code == 201, response.json()
    assert credentials.unseal(Cluster.objects.get().service_account_key) == sa_key


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("not json", "is not JSON"),
        ({"type": "authorized_user"}, "is not a service account key"),
        ({"type": "service_account", "client_email": EMAIL}, "lacks private_key, token_uri"),
    ],
)
def test_a_key_that_is_not_a_service_account_key_is_refused_by_field(
    staff_api, value, problem, django_capture_on_commit_callbacks
):
    response = create(staff_api, django_capture_on_commit_callbacks, service_account_key=value)

    assert response.status_code == 400
    assert problem in response.json()["service_account_key"][0]
    assert not Cluster.objects.exists()


def test_the_gke_client_acts_as_the_clusters_own_key(settings, sa_key):
    settings.ACCELPLANE_GKE_ENDPOINT = ""  # Google's endpoint: the key is what authenticates
    cluster = Cluster.objects.create(
        name="c", provider="gke", project="acme-ml", service_account_key=credentials.seal(sa_key)
    )

    identity = provider_for(cluster)._client._transport._credentials

    assert identity.service_account_email == EMAIL


def test_a_key_sealed_under_another_secret_is_a_clear_error(settings, sa_key):
    sealed = credentials.seal(sa_key)
    settings.ACCELPLANE_ENCRYPTION_KEY = Fernet.generate_key().decode()

    with pytest.raises(credentials.CredentialError, match="upload it again"):
        credentials.unseal(sealed)


# Kubeconfigs.


def kubeconfig_text(user: dict, server: str = "https://34.1.2.3", **cluster: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gke", "cluster": {"server": server, **cluster}}],
            "users": [{"name": "me", "user": user}, {"name": "other", "user": {"token": "x"}}],
            "contexts": [{"name": "ctx", "context": {"cluster": "gke", "user": "me"}}],
            "current-context": "ctx",
        }
    )


GCLOUD_USER = {
    "exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": "/usr/lib/google-cloud-sdk/bin/gke-gcloud-auth-plugin",
        "provideClusterInfo": True,
    }
}


def test_an_uploaded_kubeconfig_is_sealed_and_reaches_the_apiserver_with_its_token(
    staff_api, fake_kube, django_capture_on_commit_callbacks
):
    fake_kube.token = "s3cret-token"
    text = kubeconfig_text({"token": "s3cret-token"}, server=fake_kube.url)

    response = create(staff_api, django_capture_on_commit_callbacks, kubeconfig=text)

    assert response.status_code == 201, response.json()
    assert response.json()["credentials"] == {"service_account_key": False, "kubeconfig": True}
    cluster = Cluster.objects.get()
    shown = staff_api.get(f"/api/v1/clusters/{cluster.pk}").content.decode()
    history = json.dumps(list(Event.objects.values_list("data", "message")))
    assert "s3cret-token" not in cluster.kubeconfig + shown + history
    with api_client(cluster) as api:
        kube.apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "llm"}})
    assert fake_kube.requests("PATCH", "/namespaces/llm")[0].status == 200


def test_gcloud_kubeconfigs_plugin_is_never_run_a_google_token_stands_in(
    staff_api, monkeypatch, django_capture_on_commit_callbacks
):
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    text = kubeconfig_text(GCLOUD_USER, **{"certificate-authority-data": ca.decode()})
    monkeypatch.setattr(kube_client, "google_token", lambda sa_key: "google-token")

    assert create(staff_api, django_capture_on_commit_callbacks, kubeconfig=text).status_code == 201
    Cluster.objects.update(endpoint="34.1.2.3")  # as GKE reports it once the cluster runs
    with api_client(Cluster.objects.get()) as api:
        assert api.configuration.host == "https://34.1.2.3"
        assert api.configuration.ca_cert_data.startswith("-----BEGIN CERTIFICATE-----")
        assert api.configuration.auth_settings()["BearerToken"]["value"] == "Bearer google-token"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not: [yaml", "is not YAML"),
        ("token: s3cret\n", "is not a kubeconfig with a current-context"),
        (
            kubeconfig_text({"exec": {"command": "curl", "args": ["evil.example"]}}),
            "user 'me' runs curl: Accelplane never runs commands",
        ),
        (
            kubeconfig_text({"client-key": "/home/me/.kube/key.pem"}),
            "client-key of 'me' names a file on your machine: embed it as client-key-data",
        ),
        (
            kubeconfig_text({"token": "t"}, **{"certificate-authority": "/etc/ca.pem"}),
            "certificate-authority of 'gke' names a file",
        ),
        (kubeconfig_text({"auth-provider": {"name": "gcp"}}), "uses an auth-provider"),
        (kubeconfig_text({"token": "t"}, server=""), "cluster 'gke' has no server"),
    ],
)
def test_a_kubeconfig_that_would_run_or_read_anything_is_refused_by_field(
    staff_api, text, problem, django_capture_on_commit_callbacks
):
    response = create(staff_api, django_capture_on_commit_callbacks, kubeconfig=text)

    assert response.status_code == 400
    assert problem in response.json()["kubeconfig"][0]
    assert "s3cret" not in response.content.decode()
    assert not Cluster.objects.exists()


def test_a_simulated_cluster_takes_no_credentials(staff_api, django_capture_on_commit_callbacks):
    text = kubeconfig_text({"token": "t"})
    body = {"name": "sim-cluster", "kubeconfig": text}
    with django_capture_on_commit_callbacks(execute=False):
        response = staff_api.post("/api/v1/clusters", body, format="json")

    assert response.status_code == 400
    assert "only a gke cluster takes credentials" in response.json()["kubeconfig"][0]


def test_patch_replaces_credentials_audits_which_and_changes_nothing_else(
    staff_api, sa_key, django_capture_on_commit_callbacks
):
    created = create(staff_api, django_capture_on_commit_callbacks).json()
    url = f"/api/v1/clusters/{created['id']}"

    rotated = staff_api.patch(url, {"kubeconfig": kubeconfig_text({"token": "t2"})}, format="json")
    renamed = staff_api.patch(url, {"name": "other", "service_account_key": sa_key}, format="json")

    assert rotated.status_code == 200, rotated.json()
    assert rotated.json()["credentials"] == {"service_account_key": False, "kubeconfig": True}
    assert renamed.status_code == 400
    assert "only credentials change afterwards" in renamed.json()["name"][0]
    assert not Cluster.objects.get().service_account_key  # nothing half-applied
    assert staff_api.put(url, {"name": "x"}, format="json").status_code == 405
    audit = Event.objects.get(kind="audit.configured")
    assert audit.object_key == "Cluster/llm-cluster"
    assert audit.data["before"] == {"service_account_key": False, "kubeconfig": False}
    assert audit.data["after"] == {"service_account_key": False, "kubeconfig": True}
    assert "t2" not in json.dumps(audit.data)
