"""workloads.kube client and apply: the real `kubernetes` client against the fake apiserver."""

from __future__ import annotations

import base64

import pytest
import yaml

from clusters import credentials
from clusters.models import Cluster
from tests.shared import GPU_SEED, GPU_SEED_FILES, GPU_SEED_PLACEHOLDERS, requires_shared
from workloads.kube import apply as kube
from workloads.kube.apply import ObjectRef
from workloads.kube.client import KubeError, api_client, from_endpoint, from_kubeconfig
from workloads.manifests import load_documents

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "finetune", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
    "spec": {"suspend": True, "template": {"spec": {"containers": [{"name": "c"}]}}},
}
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "tgi", "namespace": "llm"},
    "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}},
}
LWS = {
    "apiVersion": "leaderworkerset.x-k8s.io/v1",
    "kind": "LeaderWorkerSet",
    "metadata": {"name": "decode", "namespace": "llm"},
    "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2}},
}


def kubeconfig(server: str, token: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )


def test_apply_is_a_server_side_apply_of_the_manifest_as_submitted(api, fake_kube):
    applied = kube.apply(api, JOB, namespace="llm")

    (call,) = fake_kube.requests("PATCH")
    assert call.path == "/apis/batch/v1/namespaces/llm/jobs/finetune"
    assert call.content_type == "application/apply-patch+yaml"
    assert call.query == {"fieldManager": "accelplane", "force": "true"}
    assert call.body == JOB  # verbatim: no namespace added, the queue label kept
    assert applied["metadata"]["namespace"] == "llm"
    assert applied["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "lq"}


def test_applying_again_updates_the_same_object(api, fake_kube):
    first = kube.apply(api, DEPLOYMENT)
    second = kube.apply(api, {**DEPLOYMENT, "spec": {**DEPLOYMENT["spec"], "replicas": 2}})

    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert fake_kube.get("apps", "deployments", "llm", "tgi")["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    ("manifest", "path"),
    [
        (
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}},
            "/api/v1/namespaces/default/services/svc",
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "cq"},
            },
            "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq",
        ),
        (
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "hi"},
            },
            "/apis/scheduling.k8s.io/v1/priorityclasses/hi",
        ),
        (
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "js"},
            },
            "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/js",
        ),
        (LWS, "/apis/leaderworkerset.x-k8s.io/v1/namespaces/llm/leaderworkersets/decode"),
    ],
)
def test_each_kind_goes_to_its_rest_path(api, fake_kube, manifest, path):
    kube.apply(api, manifest)

    assert [c.path for c in fake_kube.requests("PATCH")] == [path]


@requires_shared
def test_the_gpu_seed_applies_in_order(api, fake_kube):
    for name in (*GPU_SEED_FILES, "fine-tune-l4.yaml", "tgi-gemma-2-9b-it-hp.yaml"):
        text = (GPU_SEED / name).read_text()
        for doc in load_documents(
            text, source=name, default_namespace="llm", substitutions=GPU_SEED_PLACEHOLDERS
        ):
            kube.apply(api, doc.body, namespace="llm")

    assert sorted(fake_kube.objects) == [
        ("", "services", "llm", "headless-svc-l4"),
        ("", "services", "llm", "llm-service"),
        ("apps", "deployments", "llm", "tgi-gemma-deployment"),
        ("batch", "jobs", "llm", "finetune-gemma-l4"),
        ("kueue.x-k8s.io", "clusterqueues", "", "cluster-queue"),
        ("kueue.x-k8s.io", "localqueues", "llm", "lq"),
        ("kueue.x-k8s.io", "resourceflavors", "", "default-flavor"),
        ("scheduling.k8s.io", "priorityclasses", "", "default-priority-nonpreempting"),
        ("scheduling.k8s.io", "priorityclasses", "", "high-priority-preempting"),
        ("scheduling.k8s.io", "priorityclasses", "", "low-priority-preempting"),
    ]
    job = fake_kube.get("batch", "jobs", "llm", "finetune-gemma-l4")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "lq"
    assert all(c.status == 200 for c in fake_kube.calls)


def test_scale_patches_a_deployments_scale_subresource(api, fake_kube):
    kube.apply(api, DEPLOYMENT)

    kube.scale(api, "Deployment", "llm", "tgi", 3)

    call = fake_kube.requests("PATCH")[-1]
    assert call.path == "/apis/apps/v1/namespaces/llm/deployments/tgi/scale"
    assert call.content_type == "application/merge-patch+json"
    assert call.body == {"spec": {"replicas": 3}}
    assert fake_kube.get("apps", "deployments", "llm", "tgi")["spec"]["replicas"] == 3


def test_scale_patches_a_leader_worker_sets_replicas(api, fake_kube):
    kube.apply(api, LWS)

    kube.scale(api, "LeaderWorkerSet", "llm", "decode", 2)

    call = fake_kube.requests("PATCH")[-1]
    assert call.path == "/apis/leaderworkerset.x-k8s.io/v1/namespaces/llm/leaderworkersets/decode"
    assert fake_kube.get("leaderworkerset.x-k8s.io", "leaderworkersets", "llm", "decode")[
        "spec"
    ] == {
        "replicas": 2,
        "leaderWorkerTemplate": {"size": 2},
    }


def test_only_deployments_and_leader_worker_sets_scale(api):
    with pytest.raises(KubeError, match="Job cannot be scaled"):
        kube.scale(api, "Job", "llm", "finetune", 2)


def test_delete_takes_the_dependents_along_and_a_missing_object_is_fine(api, fake_kube):
    kube.apply(api, JOB, namespace="llm")
    job = ObjectRef.of_manifest(JOB, "llm")

    kube.delete(api, job)
    kube.delete(api, job)

    first, second = fake_kube.requests("DELETE")
    assert first.body["propagationPolicy"] == "Background"
    assert (first.status, second.status) == (200, 404)
    assert not fake_kube.objects


def test_an_apiserver_refusal_names_the_object_and_the_message(api):
    with pytest.raises(KubeError) as refused:
        kube.scale(api, "Deployment", "llm", "missing", 1)

    assert (
        str(refused.value)
        == 'scale Deployment/llm/missing: 404 deployments.apps "missing" not found'
    )
    assert refused.value.status == 404


def test_a_version_the_apiserver_does_not_serve_is_refused(api, fake_kube):
    manifest = {
        "apiVersion": "kueue.x-k8s.io/v9",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
    }

    with pytest.raises(KubeError, match="the cluster's Kueue serves kueue.x-k8s.io/v1beta2 and"):
        kube.apply(api, manifest)
    assert not fake_kube.requests("PATCH")


def test_kinds_accelplane_does_not_apply_are_refused_before_any_call(api, fake_kube):
    with pytest.raises(KubeError, match="apps/v1 DaemonSet is not a kind Accelplane applies"):
        kube.apply(api, {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"}})
    assert not fake_kube.calls


def test_an_unreachable_apiserver_is_a_clear_error():
    with from_endpoint("http://127.0.0.1:9") as api, pytest.raises(KubeError, match="unreachable"):
        kube.apply(api, DEPLOYMENT)


def test_a_kubeconfigs_token_is_sent(fake_kube):
    fake_kube.token = "s3cret"

    with from_kubeconfig(credentials.kubeconfig(kubeconfig(fake_kube.url, "s3cret"))) as api:
        kube.apply(api, DEPLOYMENT)
    with (
        from_kubeconfig(credentials.kubeconfig(kubeconfig(fake_kube.url, "wrong"))) as api,
        pytest.raises(KubeError, match="401"),
    ):
        kube.apply(api, DEPLOYMENT)


def test_a_broken_kubeconfig_is_refused_without_echoing_it():
    with pytest.raises(credentials.CredentialError) as refused:
        credentials.kubeconfig("token: s3cret\n")

    assert "s3cret" not in str(refused.value)


def test_an_endpoint_with_a_ca_verifies_tls_with_it():
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

    with from_endpoint("34.1.2.3", base64.b64encode(pem.encode()).decode(), "tok") as api:
        cfg = api.configuration
        assert cfg.host == "https://34.1.2.3"
        assert cfg.ca_cert_data == pem
        assert cfg.auth_settings()["BearerToken"]["value"] == "Bearer tok"


@pytest.mark.django_db
def test_a_cluster_without_endpoint_or_kubeconfig_has_no_client():
    cluster = Cluster.objects.create(name="new", provider="gke", project="p")

    with pytest.raises(KubeError, match="cluster new has no Kubernetes endpoint or kubeconfig yet"):
        api_client(cluster)
