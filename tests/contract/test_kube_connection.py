"""A real cluster's connection status (workloads/kube/connection.py) as the watches against
the fake apiserver leave it: alive, last event and its lag, a dropped watch and its recovery,
the last apiserver errors; shown by GET /api/v1/clusters/{id} and the cluster's page."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from clusters.models import Cluster
from events.models import Event
from tests.contract.conftest import gpu_cluster_on
from workloads import live
from workloads.kube import connection, watch
from workloads.models import KubeWatch

NODES = watch.NODES.resource


@pytest.fixture
def cluster(db, fake_kube):
    return gpu_cluster_on(fake_kube)


def node(name: str, written_ago: float) -> dict[str, Any]:
    """A Node the kubelet last wrote `written_ago` seconds ago (its managedFields time)."""
    written = timezone.now() - timedelta(seconds=written_ago)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"cloud.google.com/gke-nodepool": "default-pool"},
            "managedFields": [
                {"manager": "kubelet", "operation": "Update", "time": written.isoformat()}
            ],
        },
    }


def shown(staff_api, cluster: Cluster) -> dict[str, Any]:
    response = staff_api.get(f"/api/v1/clusters/{cluster.pk}")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()["connection"]
    return body


def nodes_watch(status: dict[str, Any]) -> dict[str, Any]:
    return next(w for w in status["watches"] if w["resource"] == NODES)


def test_a_dropped_watch_shows_until_the_next_session_reconnects(
    cluster, api, fake_kube, staff_api
):
    assert watch.claim(cluster.pk, NODES, timezone.now())  # a worker watches the nodes
    watch.watch_resource(cluster, api, watch.NODES, timeout_seconds=1)  # lists: no events yet
    before = shown(staff_api, cluster)
    assert (before["watched"], nodes_watch(before)["state"]) == (True, "watching")
    assert before["last_event_at"] is None

    fake_kube.put(node("gke-a", written_ago=30))
    fake_kube.put(node("gke-b", written_ago=30))
    fake_kube.drop_next_watch(after=1)
    dropped = watch.watch_resource(cluster, api, watch.NODES, timeout_seconds=1)

    assert dropped.disconnected
    status = shown(staff_api, cluster)
    nodes = nodes_watch(status)
    assert nodes["state"] == "reconnecting"
    assert nodes["disconnected_at"]
    assert 29 <= nodes["lag_seconds"] < 60  # gke-a: written 30 s before it came
    assert status["last_event_at"] == nodes["last_event_at"]
    assert [(e["resource"], e["message"][:13]) for e in status["errors"]] == [
        (NODES, "watch dropped")
    ]

    resumed = watch.watch_resource(cluster, api, watch.NODES, timeout_seconds=1)

    assert not resumed.disconnected
    nodes = nodes_watch(shown(staff_api, cluster))
    assert (nodes["state"], nodes["disconnected_at"]) == ("watching", None)
    assert len(nodes["errors"]) == 1  # the history stays


def test_the_last_apiserver_errors_are_kept_and_no_more(cluster):
    Cluster.objects.filter(pk=cluster.pk).update(endpoint="http://127.0.0.1:9")

    for _ in range(connection.ERRORS_KEPT + 2):
        assert watch.run_session(cluster.pk, NODES, timeout_seconds=1) == watch.RETRY_SECONDS

    status = connection.status(cluster, timezone.now())
    errors = nodes_watch(status)["errors"]
    assert len(errors) == len(status["errors"]) == connection.ERRORS_KEPT
    assert errors == sorted(errors, key=lambda e: e["at"])
    assert all(len(e["message"]) <= connection.MESSAGE_CHARS for e in errors)
    # Nobody holds the lease: the watch is stopped, whatever its last session said.
    assert nodes_watch(status)["state"] == "stopped"
    assert status["alive"] == 0


def test_the_cluster_page_shows_the_connection_and_its_errors(cluster, client):
    connection.record_error(cluster.pk, NODES, "403 Forbidden: nodes is forbidden", timezone.now())
    client.force_login(User.objects.create_user("root", is_staff=True))

    page = client.get(f"/clusters/{cluster.name}/").content.decode()

    assert "Connection to the apiserver" in page
    assert "nodes is forbidden" in page


def test_a_simulated_cluster_has_no_apiserver_to_watch(db, staff_api):
    cluster = Cluster.objects.create(name="sim", status=Cluster.Status.RUNNING)

    status = shown(staff_api, cluster)

    assert (status["watched"], status["alive"], status["errors"]) == (False, 0, [])
    assert {w["state"] for w in status["watches"]} == {"stopped"}


def test_a_change_of_watch_states_makes_one_event_per_tick_that_the_section_refreshes_on(
    cluster, client
):
    """Every watch of the cluster dropping at once (a network failure) is one
    `cluster.connection` event, not one per watch; ticks with no change make none."""

    def reported() -> list[Event]:
        live.report_mirrored(timezone.now())
        return list(Event.objects.filter(kind=connection.CONNECTION).order_by("id"))

    assert reported() == []  # never watched: nothing to say
    for resource in (NODES, "pods"):
        assert watch.claim(cluster.pk, resource, timezone.now())
    (started,) = reported()
    assert (started.cluster, started.object_key, started.data["alive"]) == (cluster.name, "", 2)
    assert len(reported()) == 1  # the next tick: no change, no event

    for resource in (NODES, "pods"):
        connection.record_error(cluster.pk, resource, "watch dropped: reset", timezone.now())
    *_, dropped = reported()
    assert dropped.data["alive"] == 0
    assert dropped.message.endswith("reconnecting: nodes, pods")
    KubeWatch.objects.filter(cluster=cluster).update(disconnected_at=None)  # answered again
    events = reported()
    assert len(events) == 3
    assert events[-1].data["alive"] == 2

    client.force_login(User.objects.create_user("root", is_staff=True))
    page = client.get(f"/clusters/{cluster.name}/").content.decode()
    assert (
        f'data-live="connection" data-live-on="cluster.connection" '
        f'data-live-object="{cluster.name}:"'
    ) in page  # live.js: `${event.cluster}:${event.object}` of the event above
    fragment = client.get(f"/clusters/{cluster.name}/?fragment=connection").content.decode()
    assert fragment.startswith('<section aria-labelledby="connection-title"')
    assert "2 of" in fragment
    assert "watches alive" in fragment
