"""Server-side request forgery: an uploaded kubeconfig, a cluster's endpoint and a service
account key decide where the workers connect, with credentials, whenever any team submits.
They may only reach a cluster's https apiserver and Google's token endpoint."""

from __future__ import annotations

import socket

import pytest
import yaml
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from clusters import credentials
from clusters.models import Cluster
from clusters.providers import ProviderError
from clusters.services import provider_for
from teams import services as teams
from tests.contract.fake_kube import FakeKube
from tests.support import GPU_QUEUES, T0, job, row_counts
from workloads import services
from workloads.kube import apply as kube
from workloads.kube.client import KubeError, api_client

pytestmark = pytest.mark.django_db

GCLOUD_PLUGIN = {"exec": {"command": "gke-gcloud-auth-plugin", "provideClusterInfo": True}}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "llm"}}


@pytest.fixture
def fake_kube():
    with FakeKube() as fake:
        yield fake


def kubeconfig_text(server: str, user: dict | None = None, **cluster) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gke", "cluster": {"server": server, **cluster}}],
            "users": [{"name": "me", "user": user or {"token": "s3cret"}}],
            "contexts": [{"name": "ctx", "context": {"cluster": "gke", "user": "me"}}],
            "current-context": "ctx",
        }
    )


def create(staff_api, django_capture_on_commit_callbacks, **fields):
    body = {"name": "llm-cluster", "provider": "gke", "project": "acme-ml", **fields}
    with django_capture_on_commit_callbacks(execute=False):  # no worker provisions here
        return staff_api.post("/api/v1/clusters", body, format="json")


def refused(staff_api, django_capture_on_commit_callbacks, field, problem, **fields):
    response = create(staff_api, django_capture_on_commit_callbacks, **fields)
    assert response.status_code == 400, response.content
    assert problem in response.json()[field][0], response.json()
    assert not Cluster.objects.exists()


# Uploads.


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ("http://34.1.2.3", "must be an https:// URL"),
        ("http://2852039166/", "must be an https:// URL"),
        ("https://127.0.0.1:6443", "127.0.0.1 is a loopback address"),
        ("https://[::1]", "::1 is a loopback address"),
        ("https://localhost:6443", "localhost (127.0.0.1) is a loopback address"),
        ("https://0x7f000001", "(127.0.0.1) is a loopback address"),
        ("https://169.254.169.254", "169.254.169.254 is link-local"),
        ("https://2852039166/", "2852039166 (169.254.169.254) is link-local"),
        ("https://[::ffff:169.254.169.254]", "is link-local"),
        ("https://[fe80::1]", "fe80::1 is link-local"),
        ("https://metadata.google.internal", "is a cloud metadata server"),
        ("https://metadata", "is a cloud metadata server"),
        ("https://[fd20:ce::254]", "is a cloud metadata server"),
        ("https://0.0.0.0", "0.0.0.0 is an unspecified address"),
        ("https://[::]", "is an unspecified address"),
        ("https://224.0.0.1", "224.0.0.1 is a multicast address"),
        ("ftp://34.1.2.3", "must be an https:// URL"),
    ],
)
def test_a_kubeconfig_server_the_workers_must_not_call_is_refused(
    staff_api, server, problem, django_capture_on_commit_callbacks
):
    refused(
        staff_api,
        django_capture_on_commit_callbacks,
        "kubeconfig",
        problem,
        kubeconfig=kubeconfig_text(server),
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("proxy-url", "http://169.254.169.254"),
        ("insecure-skip-tls-verify", True),
        ("tls-server-name", "kubernetes.default"),
    ],
)
def test_kubeconfig_fields_that_redirect_or_skip_tls_are_refused(
    staff_api, field, value, django_capture_on_commit_callbacks
):
    text = kubeconfig_text("https://34.1.2.3", **{field: value})

    refused(
        staff_api,
        django_capture_on_commit_callbacks,
        "kubeconfig",
        f"{field} of 'gke' is not accepted",
        kubeconfig=text,
    )


@pytest.mark.parametrize(
    "command",
    ["/tmp/evil/gke-gcloud-auth-plugin", "../gke-gcloud-auth-plugin", "./gke-gcloud-auth-plugin"],
)
def test_a_gke_auth_plugin_outside_the_sdks_install_paths_is_refused(
    staff_api, command, django_capture_on_commit_callbacks
):
    text = kubeconfig_text("https://34.1.2.3", {"exec": {"command": command}})

    refused(
        staff_api,
        django_capture_on_commit_callbacks,
        "kubeconfig",
        "not where the Google Cloud SDK installs gke-gcloud-auth-plugin",
        kubeconfig=text,
    )


def test_a_malformed_exec_plugin_is_a_400_not_a_500(staff_api, django_capture_on_commit_callbacks):
    text = kubeconfig_text("https://34.1.2.3", {"exec": "gke-gcloud-auth-plugin"})

    refused(
        staff_api,
        django_capture_on_commit_callbacks,
        "kubeconfig",
        "runs a command",
        kubeconfig=text,
    )


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"token_uri": "https://evil.example/token"}, "token_uri 'https://evil.example/token'"),
        ({"token_uri": "http://oauth2.googleapis.com/token"}, "is not Google's"),
        ({"token_uri": ["https://oauth2.googleapis.com/token"]}, "is not Google's"),
        ({"universe_domain": "evil.example"}, "universe_domain is not googleapis.com"),
    ],
)
def test_a_service_account_key_sending_its_assertion_elsewhere_is_refused(
    staff_api, sa_key, fields, problem, django_capture_on_commit_callbacks
):
    refused(
        staff_api,
        django_capture_on_commit_callbacks,
        "service_account_key",
        problem,
        service_account_key={**sa_key, **fields},
    )


def test_googles_token_endpoints_are_accepted(
    staff_api, sa_key, django_capture_on_commit_callbacks
):
    legacy = {**sa_key, "token_uri": "https://accounts.google.com/o/oauth2/token"}

    response = create(staff_api, django_capture_on_commit_callbacks, service_account_key=legacy)

    assert response.status_code == 201, response.json()


def test_the_development_setting_lets_the_loopback_fake_through_but_never_link_local(
    staff_api, settings, fake_kube, django_capture_on_commit_callbacks
):
    settings.ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS = True
    fake_kube.token = "s3cret"

    metadata = create(
        staff_api,
        django_capture_on_commit_callbacks,
        kubeconfig=kubeconfig_text("http://169.254.169.254"),
    )
    loopback = create(
        staff_api, django_capture_on_commit_callbacks, kubeconfig=kubeconfig_text(fake_kube.url)
    )

    assert metadata.status_code == 400
    assert "169.254.169.254 is link-local" in metadata.json()["kubeconfig"][0]
    assert loopback.status_code == 201, loopback.json()
    with api_client(Cluster.objects.get()) as api:
        kube.apply(api, NAMESPACE)
    assert fake_kube.requests("PATCH", "/namespaces/llm")[0].status == 200


# Calls: rows stored before these rules (or written around the API) are checked again.


def stored_cluster(**fields) -> Cluster:
    """A gke cluster row written straight to the database, as before these checks."""
    return Cluster.objects.create(
        name="old", provider="gke", project="p", status=Cluster.Status.RUNNING, **fields
    )


def sealed_kubeconfig(server: str, user: dict | None = None, **cluster) -> str:
    return credentials.seal(yaml.safe_load(kubeconfig_text(server, user, **cluster)))


def test_a_submit_never_calls_a_loopback_server_stored_before_the_fix(settings, fake_kube):
    settings.ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS = True  # to set the cluster up
    cluster = stored_cluster(kubeconfig=sealed_kubeconfig(fake_kube.url))
    services.apply(cluster, GPU_QUEUES, source="queues.yaml", now=T0)
    teams.ensure_team("llm", namespaces=["llm"], members=[("alice", "submitter")])
    _, token = teams.issue_token(User.objects.get(username="alice"))
    alice = APIClient()
    alice.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    settings.ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS = False  # production
    calls, before = len(fake_kube.calls), row_counts()

    response = alice.post("/api/v1/workloads?namespace=llm", job(), content_type="application/yaml")

    assert response.status_code == 502
    assert "must be an https:// URL" in response.json()["detail"]
    assert len(fake_kube.calls) == calls
    after = row_counts()
    assert after.pop("events.Event") == before.pop("events.Event") + 1  # workload.rejected
    assert after == before


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (lambda: {"endpoint": "169.254.169.254"}, "169.254.169.254 is link-local"),
        (lambda: {"endpoint": "http://34.1.2.3"}, "must be an https:// URL"),
        (
            lambda: {
                "kubeconfig": sealed_kubeconfig(
                    "https://34.1.2.3", **{"proxy-url": "http://x:3128"}
                )
            },
            "proxy-url of 'gke' is not accepted",
        ),
        (
            lambda: {
                "kubeconfig": sealed_kubeconfig("https://34.1.2.3", {"exec": {"command": "/tmp/x"}})
            },
            "Accelplane never runs commands",
        ),
        (
            lambda: {"kubeconfig": sealed_kubeconfig("https://[::ffff:a9fe:a9fe]")},
            "is link-local",
        ),
    ],
)
def test_a_stored_cluster_pointing_somewhere_forbidden_gets_no_client(fields, problem):
    cluster = stored_cluster(**fields())

    with pytest.raises(KubeError, match=problem):
        api_client(cluster)


def test_the_google_token_goes_only_to_the_endpoint_gke_reports(monkeypatch):
    from workloads.kube import client as kube_client

    sent = []
    monkeypatch.setattr(kube_client, "google_token", lambda sa_key: sent.append(sa_key) or "google")
    elsewhere = stored_cluster(
        endpoint="34.1.2.3", kubeconfig=sealed_kubeconfig("https://34.9.9.9", GCLOUD_PLUGIN)
    )
    reported = Cluster.objects.create(
        name="reported",
        provider="gke",
        endpoint="34.1.2.3",
        kubeconfig=sealed_kubeconfig("https://34.1.2.3:443", GCLOUD_PLUGIN),
    )

    with pytest.raises(KubeError, match="is not the endpoint GKE reports for it"):
        api_client(elsewhere)
    assert sent == []
    with api_client(reported) as api:
        assert api.configuration.auth_settings()["BearerToken"]["value"] == "Bearer google"


def test_the_google_token_is_never_sent_over_plain_http(settings, monkeypatch, fake_kube):
    from workloads.kube import client as kube_client

    settings.ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS = True
    monkeypatch.setattr(kube_client, "google_token", lambda sa_key: "google")
    cluster = stored_cluster(
        endpoint=fake_kube.url, kubeconfig=sealed_kubeconfig(fake_kube.url, GCLOUD_PLUGIN)
    )

    with pytest.raises(KubeError, match="over https only"):
        api_client(cluster)
    assert fake_kube.calls == []


def test_a_stored_key_with_a_foreign_token_uri_is_never_used(sa_key):
    cluster = stored_cluster(
        endpoint="34.1.2.3",
        service_account_key=credentials.seal({**sa_key, "token_uri": "http://169.254.169.254/t"}),
    )

    with pytest.raises(ProviderError, match="is not Google's"):
        provider_for(cluster)
    with pytest.raises(KubeError, match="is not Google's"):
        api_client(cluster)


def test_the_gke_api_endpoint_comes_from_settings_never_from_the_key(settings, sa_key):
    settings.ACCELPLANE_GKE_ENDPOINT = ""
    planted = {**sa_key, "api_endpoint": "http://169.254.169.254", "client_options": {"x": 1}}
    cluster = stored_cluster(service_account_key=credentials.seal(planted))

    transport = provider_for(cluster)._client._transport

    assert transport._host == "https://container.googleapis.com"


def test_a_name_that_resolves_elsewhere_when_connecting_is_refused_on_the_socket(
    monkeypatch, fake_kube
):
    """DNS rebinding: checked when the client is built (a public address), the name then
    resolves to loopback; the connection is refused before anything is sent."""
    real = socket.getaddrinfo
    answers = iter(["34.1.2.3"])
    port = int(fake_kube.url.rsplit(":", 1)[1])

    def rebinding(host, *args, **kwargs):
        if host != "apiserver.example":
            return real(host, *args, **kwargs)
        address = next(answers, "127.0.0.1")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    cluster = stored_cluster(kubeconfig=sealed_kubeconfig("https://apiserver.example"))

    with api_client(cluster) as api, pytest.raises(KubeError) as refusal:
        kube.apply(api, NAMESPACE)

    assert "apiserver.example (127.0.0.1) is a loopback address" in str(refusal.value)
    assert fake_kube.calls == []
