"""Watch sessions over Kueue Workload objects (all namespaces), resumable across disconnects.

The last resourceVersion ingested is stored per cluster (KubeWatch), so a new session, in
this process or another, resumes where the last one stopped; a version the apiserver has
compacted away (410 Gone) is recovered from by listing everything again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import urllib3
from django.db.models import Q, QuerySet
from django.utils import timezone
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from clusters.models import Cluster
from workloads.kube import checkpoints, ingest
from workloads.kube.client import KubeError, api_client
from workloads.models import KubeWatch

logger = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"
RESOURCE = f"{PLURAL}.{GROUP}"
HTTP_GONE = 410
SESSION_SECONDS = 300
# After a failure or a dropped connection: give the apiserver a moment.
RETRY_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Session:
    events: int
    """Accelplane events the session's changes made."""
    resource_version: str
    relisted: bool
    disconnected: bool


def watch_workloads(cluster: Cluster, api: client.ApiClient, timeout_seconds: int) -> Session:
    """One bounded session: list if nothing is stored yet, then watch until the timeout."""
    state, _ = KubeWatch.objects.get_or_create(cluster=cluster, resource=RESOURCE)
    custom = client.CustomObjectsApi(api)
    events, relisted, disconnected = 0, False, False
    if not state.resource_version:
        events += _relist(cluster, custom, state)
        relisted = True
    try:
        # Counted change by change: a dropped connection keeps what came before it.
        for made in _stream(cluster, custom, state, timeout_seconds):
            events += made
    except ApiException as error:
        if error.status != HTTP_GONE:
            raise
        logger.info("%s: watch from %s expired; relisting", cluster.name, state.resource_version)
        events += _relist(cluster, custom, state)
        relisted = True
    except urllib3.exceptions.HTTPError as error:
        # The stored version is where the next session resumes.
        logger.info("%s: watch dropped (%s)", cluster.name, error)
        disconnected = True
    return Session(events, state.resource_version, relisted, disconnected)


def _relist(cluster: Cluster, custom: client.CustomObjectsApi, state: KubeWatch) -> int:
    listed = cast(dict[str, Any], custom.list_cluster_custom_object(GROUP, VERSION, PLURAL))
    items = listed.get("items") or []
    now = timezone.now()
    events = sum(len(ingest.ingest(cluster, obj, now)) for obj in items)
    ingest.forget_all_but(cluster, [obj["metadata"]["uid"] for obj in items])
    _store(state, listed["metadata"]["resourceVersion"])
    return events


def _stream(
    cluster: Cluster, custom: client.CustomObjectsApi, state: KubeWatch, timeout_seconds: int
) -> Iterator[int]:
    """The number of events each change made, once it is ingested and its version stored."""
    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
        custom.list_cluster_custom_object,
        GROUP,
        VERSION,
        PLURAL,
        resource_version=state.resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=timeout_seconds,
    )
    for change in stream:
        obj = change["raw_object"]
        made = 0
        if change["type"] in ("ADDED", "MODIFIED"):
            made = len(ingest.ingest(cluster, obj, timezone.now()))
        elif change["type"] == "DELETED":
            # The row itself goes when its owner is deleted through Accelplane.
            ingest.forget(cluster, [obj["metadata"]["uid"]])
        # A BOOKMARK only moves the version.
        _store(state, obj["metadata"]["resourceVersion"])
        yield made


def _store(state: KubeWatch, resource_version: str) -> None:
    state.resource_version = resource_version
    state.save(update_fields=["resource_version", "updated_at"])


# A session's lease covers the session and a margin for the task's queueing; a worker that
# dies mid-session leaves a lease that expires this long after the session should have ended.
LEASE_MARGIN = timedelta(seconds=60)


def watchable_clusters() -> QuerySet[Cluster]:
    """Running GKE clusters whose Kubernetes API Accelplane can reach."""
    return Cluster.objects.filter(
        provider=Cluster.Provider.GKE, status=Cluster.Status.RUNNING
    ).exclude(endpoint="", kubeconfig="")


def claim(cluster_id: int, now: datetime, seconds: float = SESSION_SECONDS) -> bool:
    """Take the cluster's watch lease unless a live one is held: one watcher per cluster."""
    KubeWatch.objects.get_or_create(cluster_id=cluster_id, resource=RESOURCE)
    free = Q(leased_until__isnull=True) | Q(leased_until__lt=now)
    until = now + timedelta(seconds=seconds) + LEASE_MARGIN
    taken = KubeWatch.objects.filter(free, cluster_id=cluster_id, resource=RESOURCE)
    return bool(taken.update(leased_until=until))


def renew(cluster_id: int, now: datetime, seconds: float) -> None:
    until = now + timedelta(seconds=seconds + SESSION_SECONDS) + LEASE_MARGIN
    KubeWatch.objects.filter(cluster_id=cluster_id, resource=RESOURCE).update(leased_until=until)


def release(cluster_id: int) -> None:
    KubeWatch.objects.filter(cluster_id=cluster_id, resource=RESOURCE).update(leased_until=None)


def watched_cluster(cluster_id: int) -> Cluster | None:
    return watchable_clusters().filter(pk=cluster_id).first()


def run_session(cluster_id: int, timeout_seconds: int = SESSION_SECONDS) -> float | None:
    """One session for the watch task: seconds until the next one; None: stop watching."""
    cluster = watched_cluster(cluster_id)
    if cluster is None:
        return None
    try:
        with api_client(cluster) as api:
            session = watch_workloads(cluster, api, timeout_seconds)
            # Twice the session: lines logged while the last one ran are read again (and
            # recorded once), not lost between sessions.
            checkpoints.collect(cluster, api, timezone.now(), since_seconds=2 * SESSION_SECONDS)
    except (KubeError, ApiException, urllib3.exceptions.HTTPError) as error:
        logger.warning("%s: watch failed: %s", cluster.name, error)
        return RETRY_SECONDS
    return RETRY_SECONDS if session.disconnected else 0
