"""GkeProvider through the real google-cloud-container client against the fake GKE API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import google.auth
import google.auth.exceptions
import pytest

from clusters.providers import get_provider
from clusters.providers.base import ClusterSpec, NodePoolSpec, ProviderError
from clusters.providers.gke import GkeProvider

PROJECT, REGION = "acme-ml", "us-central1"
LOCATION = f"projects/{PROJECT}/locations/{REGION}"
CLUSTER_PATH = f"{LOCATION}/clusters/llm-cluster"
STANDARD = ClusterSpec("llm-cluster", PROJECT, REGION)
AUTOPILOT = ClusterSpec("llm-cluster", PROJECT, REGION, autopilot=True)
GPU_POOL = NodePoolSpec(STANDARD, "gpupool", "g2-standard-24", 3)
# Enum values as the REST transport sends them (ints).
RAPID, GKE_METADATA, GPU_DRIVER_LATEST, COMPACT, SPECIFIC_RESERVATION = 1, 2, 3, 1, 3


def finish(gke, operation_id):
    """Poll like the reconcile task does until the operation is done."""
    for _ in range(10):
        operation = gke.get_operation(operation_id)
        if operation.done:
            return operation
    raise AssertionError(f"{operation_id} never finished")


def running_cluster(gke, spec=STANDARD):
    finish(gke, gke.create_cluster(spec).id)


def sent(fake_gke, suffix):
    (call,) = fake_gke.requests("POST", suffix, status=200)
    return call.body


def test_a_standard_cluster_carries_the_workflow_settings(gke, fake_gke):
    spec = ClusterSpec(
        "llm-cluster",
        PROJECT,
        REGION,
        version="1.36.0-gke.2459000",
        slice_controller=True,
        system_machine_type="n2-standard-32",
    )

    operation = gke.create_cluster(spec)

    assert operation.id.startswith(f"{LOCATION}/operations/")
    assert not operation.done
    cluster = sent(fake_gke, f"{LOCATION}/clusters")["cluster"]
    assert cluster["name"] == "llm-cluster"
    assert cluster["releaseChannel"] == {"channel": RAPID}
    assert cluster["initialClusterVersion"] == "1.36.0-gke.2459000"
    assert cluster["workloadIdentityConfig"] == {"workloadPool": f"{PROJECT}.svc.id.goog"}
    assert cluster["ipAllocationPolicy"] == {"useIpAliases": True}
    assert cluster["addonsConfig"] == {
        "gcsFuseCsiDriverConfig": {"enabled": True},
        "sliceControllerConfig": {"enabled": True},
    }
    assert cluster["nodePools"] == [
        {
            "name": "default-pool",
            "initialNodeCount": 1,
            "config": {
                "machineType": "n2-standard-32",
                "workloadMetadataConfig": {"mode": GKE_METADATA},
            },
        }
    ]


def test_a_cluster_operation_is_polled_until_done_and_the_cluster_runs(gke, fake_gke):
    operation = gke.create_cluster(STANDARD)

    first = gke.get_operation(operation.id)
    last = finish(gke, operation.id)

    assert (first.done, last.done, last.error) == (False, True, "")
    cluster = gke.get_cluster(STANDARD)
    assert (cluster.status, [p.name for p in cluster.node_pools]) == ("RUNNING", ["default-pool"])
    assert [c.name for c in gke.list_clusters(PROJECT, REGION)] == ["llm-cluster"]


def test_an_autopilot_cluster_sends_no_nodes_or_add_ons(gke, fake_gke):
    gke.create_cluster(AUTOPILOT)

    cluster = sent(fake_gke, f"{LOCATION}/clusters")["cluster"]
    assert cluster == {
        "name": "llm-cluster",
        "autopilot": {"enabled": True},
        "releaseChannel": {"channel": RAPID},
    }


def test_an_autopilot_cluster_refuses_node_pools_without_asking_gke(gke, fake_gke):
    with pytest.raises(ProviderError) as caught:
        gke.create_node_pool(NodePoolSpec(AUTOPILOT, "gpupool", "g2-standard-24", 3))

    assert caught.value.permanent
    assert "Autopilot cluster llm-cluster" in caught.value.message
    assert fake_gke.calls == []


def test_an_l4_pool_asks_for_its_gpus_with_the_latest_driver_in_one_zone(gke, fake_gke):
    running_cluster(gke)

    finish(gke, gke.create_node_pool(GPU_POOL).id)

    pool = sent(fake_gke, f"{CLUSTER_PATH}/nodePools")["nodePool"]
    assert pool == {
        "name": "gpupool",
        "initialNodeCount": 3,
        "locations": ["us-central1-a"],
        "config": {
            "machineType": "g2-standard-24",
            "accelerators": [
                {
                    "acceleratorType": "nvidia-l4",
                    "acceleratorCount": "2",
                    "gpuDriverInstallationConfig": {"gpuDriverVersion": GPU_DRIVER_LATEST},
                }
            ],
            "workloadMetadataConfig": {"mode": GKE_METADATA},
        },
    }
    assert fake_gke.pool(CLUSTER_PATH, "gpupool")["status"] == "RUNNING"
    nodes = gke.list_nodes(GPU_POOL)
    assert len(nodes) == 3
    assert nodes[0].labels["cloud.google.com/gke-accelerator"] == "nvidia-l4"


def test_a_multi_host_v5e_pool_is_one_compact_slice_of_its_topology(gke, fake_gke):
    running_cluster(gke)
    spec = NodePoolSpec(STANDARD, "tpu-v5e", "ct5lp-hightpu-4t", 4, "4x4", zone="us-west4-a")

    gke.create_node_pool(spec)

    pool = sent(fake_gke, f"{CLUSTER_PATH}/nodePools")["nodePool"]
    assert pool["placementPolicy"] == {"type": COMPACT, "tpuTopology": "4x4"}
    assert pool["locations"] == ["us-west4-a"]
    assert pool["initialNodeCount"] == 4
    assert "accelerators" not in pool["config"]  # GKE derives TPU chips from the machine type


def test_a_single_host_v5e_pool_needs_no_placement_policy(gke, fake_gke):
    running_cluster(gke)

    gke.create_node_pool(NodePoolSpec(STANDARD, "tpu-nodepool", "ct5lp-hightpu-8t", 2, "2x4"))

    assert "placementPolicy" not in sent(fake_gke, f"{CLUSTER_PATH}/nodePools")["nodePool"]


def test_a_super_slicing_pool_names_its_workload_policy_and_reservation_block(gke, fake_gke):
    running_cluster(gke)
    block = f"projects/{PROJECT}/reservations/tpu7x-res/reservationBlocks/block-0"
    spec = NodePoolSpec(
        STANDARD,
        "tpu7-pool-1",
        "tpu7x-standard-4t",
        16,
        "4x4x4",
        zone="us-central1-ai1a",
        reservation=block,
        workload_policy="superslice-policy",
    )

    gke.create_node_pool(spec)

    pool = sent(fake_gke, f"{CLUSTER_PATH}/nodePools")["nodePool"]
    assert pool["placementPolicy"] == {"policyName": "superslice-policy"}
    assert pool["locations"] == ["us-central1-ai1a"]
    assert pool["initialNodeCount"] == 16
    assert pool["config"]["reservationAffinity"] == {
        "consumeReservationType": SPECIFIC_RESERVATION,
        "key": "compute.googleapis.com/reservation-name",
        "values": [block],
    }


@pytest.mark.parametrize(
    ("status", "message", "reason", "permanent", "says"),
    [
        ("RESOURCE_EXHAUSTED", "", "", True, f"quota exceeded in project {PROJECT}"),
        (
            "PERMISSION_DENIED",
            "Insufficient regional quota to satisfy request: resource 'CPUS'",
            "",
            True,
            "quota exceeded",
        ),
        ("RESOURCE_EXHAUSTED", "Too many requests", "RATE_LIMIT_EXCEEDED", False, "rate limit"),
        ("PERMISSION_DENIED", "", "", True, "roles/container.admin"),
        ("UNAVAILABLE", "", "", False, "currently unavailable"),
        ("INTERNAL", "Internal error", "", False, "Internal error"),
        ("INVALID_ARGUMENT", "Node pool name is invalid", "", True, "name is invalid"),
    ],
)
def test_google_errors_become_provider_errors_naming_the_pool(
    gke, fake_gke, status, message, reason, permanent, says
):
    running_cluster(gke)
    fake_gke.fail_next(status, message, reason)

    with pytest.raises(ProviderError) as caught:
        gke.create_node_pool(GPU_POOL)

    assert caught.value.permanent is permanent
    assert caught.value.message.startswith("node pool gpupool of cluster llm-cluster")
    assert says in caught.value.message
    assert "http://" not in caught.value.message  # Google's text, not the transport's URL


def test_a_pool_on_a_missing_cluster_is_a_permanent_error_naming_it(gke):
    with pytest.raises(ProviderError) as caught:
        gke.create_node_pool(GPU_POOL)

    assert caught.value.permanent
    assert caught.value.message == (
        f"node pool gpupool of cluster llm-cluster: Not found: {CLUSTER_PATH}."
    )


def test_a_pool_on_a_busy_cluster_is_retried(gke, fake_gke):
    running_cluster(gke)
    gke.create_node_pool(GPU_POOL)

    with pytest.raises(ProviderError) as caught:
        gke.create_node_pool(NodePoolSpec(STANDARD, "cpupool", "e2-standard-4", 1))

    assert not caught.value.permanent
    assert "busy" in caught.value.message


def test_a_failed_operation_is_done_with_googles_reason(gke, fake_gke):
    running_cluster(gke)
    fake_gke.fail_next_operation("GCE_STOCKOUT: no g2-standard-24 left in us-central1-a")

    operation = finish(gke, gke.create_node_pool(GPU_POOL).id)

    assert operation.error.startswith("GCE_STOCKOUT")


def test_a_retried_create_adopts_the_cluster_the_first_attempt_made(gke, fake_gke):
    gke.create_cluster(STANDARD)  # its operation id is lost, say by a worker crash

    retried = gke.create_cluster(STANDARD)

    assert retried.id == CLUSTER_PATH
    assert not retried.done
    assert finish(gke, retried.id).error == ""
    assert len(fake_gke.requests("POST", "/clusters", status=200)) == 1
    assert len(fake_gke.requests("POST", "/clusters", status=409)) == 1
    assert list(fake_gke.clusters) == [CLUSTER_PATH]


def test_a_retried_pool_create_adopts_the_pool(gke, fake_gke):
    running_cluster(gke)
    finish(gke, gke.create_node_pool(GPU_POOL).id)

    retried = gke.create_node_pool(GPU_POOL)

    assert (retried.id, retried.done) == (f"{CLUSTER_PATH}/nodePools/gpupool", True)
    assert len(fake_gke.requests("POST", "/nodePools", status=200)) == 1


def test_an_adopted_cluster_in_error_reports_why(gke, fake_gke):
    fake_gke.fail_next_operation("Insufficient quota to create the default pool")
    gke.create_cluster(STANDARD)
    fake_gke.polls_to_finish = 0

    operation = finish(gke, gke.create_cluster(STANDARD).id)

    assert operation.error == "Insufficient quota to create the default pool"


def test_resize_and_delete_finish_and_a_repeated_delete_is_done(gke, fake_gke):
    running_cluster(gke)
    finish(gke, gke.create_node_pool(GPU_POOL).id)

    finish(gke, gke.set_node_pool_size(GPU_POOL, 5).id)
    assert fake_gke.pool(CLUSTER_PATH, "gpupool")["initialNodeCount"] == 5
    finish(gke, gke.delete_node_pool(GPU_POOL).id)
    assert [p.name for p in gke.get_cluster(STANDARD).node_pools] == ["default-pool"]
    finish(gke, gke.delete_cluster(STANDARD).id)

    assert gke.delete_cluster(STANDARD).done
    assert gke.list_clusters(PROJECT, REGION) == []


def test_a_cluster_without_a_project_is_refused():
    gke = GkeProvider(api_endpoint="http://127.0.0.1:9")

    with pytest.raises(ProviderError, match="needs a Google Cloud project") as caught:
        gke.create_cluster(ClusterSpec("llm-cluster", "", REGION))

    assert caught.value.permanent


def test_missing_credentials_say_how_to_provide_them(monkeypatch):
    def no_credentials(**_):
        raise google.auth.exceptions.DefaultCredentialsError("none found")

    monkeypatch.setattr(google.auth, "default", no_credentials)

    with pytest.raises(ProviderError, match="application-default login") as caught:
        GkeProvider()

    assert caught.value.permanent


def test_an_unreadable_key_file_is_named_but_never_echoed(settings, tmp_path):
    key_file = tmp_path / "key.json"
    key_file.write_text('{"private_key": "-----BEGIN PRIVATE KEY----- s3cret')
    settings.ACCELPLANE_GKE_CREDENTIALS_FILE = str(key_file)

    with pytest.raises(ProviderError) as caught:
        get_provider("gke")

    assert str(key_file) in caught.value.message
    assert "s3cret" not in caught.value.message


def test_get_provider_points_the_client_at_the_configured_endpoint(settings, fake_gke):
    settings.ACCELPLANE_GKE_ENDPOINT = fake_gke.url

    get_provider("gke").create_cluster(STANDARD)

    assert list(fake_gke.clusters) == [CLUSTER_PATH]


@pytest.mark.parametrize(
    ("cluster", "says"),
    [
        ({"name": "c", "initialNodeCount": 1, "nodeCount": 3}, "nodeCount"),
        ({"name": "c", "initialNodeCount": "many"}, "initialNodeCount"),
        ({"name": "c", "initialNodeCount": 1, "addonsConfig": {"gcsFuse": {}}}, "gcsFuse"),
        ({"name": "c", "initialNodeCount": 1, "releaseChannel": {"channel": "FAST"}}, "FAST"),
        ({"name": "c"}, "initial_node_count must be greater than zero"),
    ],
)
def test_the_fake_refuses_what_google_refuses(fake_gke, cluster, says):
    request = urllib.request.Request(
        f"{fake_gke.url}/v1/{LOCATION}/clusters",
        data=json.dumps({"cluster": cluster}).encode(),
        method="POST",
    )

    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request)

    error = json.loads(caught.value.read())["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert says in error["message"]
    assert fake_gke.clusters == {}
