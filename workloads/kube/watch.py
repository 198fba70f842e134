"""Watch sessions over a real cluster's Kueue objects and Workloads, Jobs, Pods and Nodes,
resumable across disconnects.

Each resource is watched on its own, by one worker at a time (a lease on its KubeWatch row).
The last resourceVersion ingested is stored there too, so a new session, in this process or
another, resumes where the last one stopped; a version the apiserver has compacted away
(410 Gone) is recovered from by listing everything again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import urllib3
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Q, QuerySet
from django.utils import timezone
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from clusters.models import Cluster
from workloads.kube import checkpoints, connection, ingest, mirror, queues
from workloads.kube.apply import KUEUE_GROUP, KUEUE_NAMESPACE, kueue_version
from workloads.kube.client import KubeError, api_client
from workloads.models import KubeWatch

logger = logging.getLogger(__name__)

HTTP_GONE = 410
SESSION_SECONDS = settings.ACCELPLANE_WATCH_SESSION_SECONDS
# After a failure or a dropped connection: give the apiserver a moment.
RETRY_SECONDS = 5.0
# Objects per list page (`limit`); a relist follows `continue` to the last page.
LIST_PAGE = 500


def _kueue(plural: str) -> Callable[[client.ApiClient], Callable[..., Any]]:
    def lister(api: client.ApiClient) -> Callable[..., Any]:
        # The version the cluster serves, found again each session (Kueue may be upgraded).
        version = kueue_version(api)
        objects = client.CustomObjectsApi(api)
        return partial(objects.list_cluster_custom_object, KUEUE_GROUP, version, plural)

    return lister


def _kueue_config_maps(api: client.ApiClient) -> Callable[..., Any]:
    return partial(client.CoreV1Api(api).list_namespaced_config_map, KUEUE_NAMESPACE)


def _forget_workload(cluster: Cluster, obj: Mapping[str, Any]) -> None:
    # The row itself goes when its owner is deleted through Accelplane.
    ingest.forget(cluster, [obj["metadata"]["uid"]])


def _keep_workloads(cluster: Cluster, items: list[Mapping[str, Any]]) -> None:
    ingest.forget_all_but(cluster, [obj["metadata"]["uid"] for obj in items])


@dataclass(frozen=True, slots=True)
class Watched:
    """A resource Accelplane watches, and what its changes do to the rows."""

    resource: str
    """plural.group: its KubeWatch row"""
    lister: Callable[[client.ApiClient], Callable[..., Any]]
    ingest: Callable[[Cluster, Mapping[str, Any], datetime], int]
    """brings the rows in line with one object; the number of events that made"""
    forget: Callable[[Cluster, Mapping[str, Any]], None]
    keep_only: Callable[[Cluster, list[Mapping[str, Any]]], None]
    """after a list: forget what is not in it"""
    listed_after: tuple[str, ...] = ()
    """resources whose first list must be ingested before this one's: the rows its objects
    point at come from them"""


WORKLOADS = Watched(
    ingest.RESOURCE,
    _kueue("workloads"),
    lambda cluster, obj, now: len(ingest.ingest(cluster, obj, now)),
    _forget_workload,
    _keep_workloads,
)
PODS = Watched(
    "pods",
    lambda api: client.CoreV1Api(api).list_pod_for_all_namespaces,
    mirror.ingest_pod,
    mirror.forget_pod,
    mirror.keep_pods,
    # A pod of a Job submitted with kubectl is kept only once its owner's row exists, which
    # the Workloads' list makes: listed first, the running pods of an imported cluster would
    # be dropped and, never changing again, never come back.
    listed_after=(WORKLOADS.resource,),
)
NODES = Watched(
    "nodes",
    lambda api: client.CoreV1Api(api).list_node,
    mirror.ingest_node,
    mirror.forget_node,
    mirror.keep_nodes,
)
JOBS = Watched(
    "jobs.batch",
    lambda api: client.BatchV1Api(api).list_job_for_all_namespaces,
    ingest.ingest_job,
    ingest.forget_job,
    ingest.keep_jobs,
)


def _queue_objects(kind: str) -> Watched:
    return Watched(
        queues.resource(kind),
        _kueue_config_maps if kind == queues.CONFIGURATION else _kueue(queues.plural(kind)),
        partial(queues.ingest, kind),
        partial(queues.forget, kind),
        partial(queues.keep_only, kind),
    )


QUEUE_OBJECTS = tuple(_queue_objects(kind) for kind in (*queues.KINDS, queues.CONFIGURATION))
WATCHED = {w.resource: w for w in (*QUEUE_OBJECTS, NODES, WORKLOADS, PODS, JOBS)}


@dataclass(frozen=True, slots=True)
class Session:
    events: int
    """Accelplane events the session's changes made."""
    resource_version: str
    relisted: bool
    disconnected: bool


def watch_resource(
    cluster: Cluster, api: client.ApiClient, watched: Watched, timeout_seconds: int
) -> Session:
    """One bounded session: list if nothing is stored yet, then watch until the timeout."""
    state, _ = KubeWatch.objects.get_or_create(cluster=cluster, resource=watched.resource)
    lister = watched.lister(api)
    events, relisted, disconnected = 0, False, False
    if not state.resource_version:
        events += _relist(cluster, watched, lister, state)
        relisted = True
    try:
        # Counted change by change: a dropped connection keeps what came before it.
        for made in _stream(cluster, watched, lister, state, timeout_seconds):
            events += made
    except ApiException as error:
        if error.status != HTTP_GONE:
            raise
        logger.info(
            "%s: %s watch from %s expired; relisting",
            cluster.name,
            watched.resource,
            state.resource_version,
        )
        events += _relist(cluster, watched, lister, state)
        relisted = True
    except urllib3.exceptions.HTTPError as error:
        # The stored version is where the next session resumes.
        logger.info("%s: %s watch dropped (%s)", cluster.name, watched.resource, error)
        connection.record_error(
            cluster.pk, watched.resource, f"watch dropped: {error}", timezone.now()
        )
        disconnected = True
    return Session(events, state.resource_version, relisted, disconnected)


def _relist(
    cluster: Cluster, watched: Watched, lister: Callable[..., Any], state: KubeWatch
) -> int:
    """Every object, a page at a time; then what the list did not hold is forgotten."""
    events, version = 0, ""
    seen: list[Mapping[str, Any]] = []
    for page in pages(lister):
        now = timezone.now()
        items = page.get("items") or []
        events += sum(watched.ingest(cluster, obj, now) for obj in items)
        # Only names and uids are needed to forget the rest: the objects are not kept.
        seen += [{"metadata": obj.get("metadata") or {}} for obj in items]
        version = page["metadata"]["resourceVersion"]
    watched.keep_only(cluster, seen)
    _store(state, version)
    return events


def pages(lister: Callable[..., Any], **query: Any) -> Iterator[dict[str, Any]]:
    """The pages of a list (`limit`, then `continue` until the apiserver sends none), as
    served JSON whatever the API. A token that expired meanwhile is the apiserver's 410."""
    token = ""
    while True:
        more = {"_continue": token} if token else {}
        page = json.loads(lister(limit=LIST_PAGE, _preload_content=False, **query, **more).data)
        yield page
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return


def _stream(
    cluster: Cluster,
    watched: Watched,
    lister: Callable[..., Any],
    state: KubeWatch,
    timeout_seconds: int,
) -> Iterator[int]:
    """The number of events each change made, once it is ingested and its version stored."""
    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
        lister,
        resource_version=state.resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=timeout_seconds,
    )
    for change in stream:
        obj = change["raw_object"]
        made = 0
        if change["type"] in ("ADDED", "MODIFIED"):
            made = watched.ingest(cluster, obj, timezone.now())
        elif change["type"] == "DELETED":
            watched.forget(cluster, obj)
        # A BOOKMARK only moves the version (and says the connection is alive).
        changed = obj if change["type"] != "BOOKMARK" else None
        _store(state, obj["metadata"]["resourceVersion"], changed)
        yield made


def _store(
    state: KubeWatch, resource_version: str, changed: Mapping[str, Any] | None = None
) -> None:
    """Where the next session resumes; the apiserver answered, so the watch is connected."""
    state.resource_version = resource_version
    heard = connection.heard(state, changed, timezone.now())
    state.save(update_fields=["resource_version", "updated_at", *heard])


# A session's lease covers the session and a margin for the task's queueing; a worker that
# dies mid-session leaves a lease that expires this long after the session should have ended.
LEASE_MARGIN = timedelta(seconds=60)


def watchable_clusters() -> QuerySet[Cluster]:
    """Running GKE clusters whose Kubernetes API Accelplane can reach."""
    return Cluster.objects.filter(
        provider=Cluster.Provider.GKE, status=Cluster.Status.RUNNING
    ).exclude(endpoint="", kubeconfig="")


def watcher_threads() -> int:
    """The watcher's pool: a thread per session of every cluster it may watch at once."""
    return settings.ACCELPLANE_MAX_WATCHED_CLUSTERS * len(WATCHED)


def claim(cluster_id: int, resource: str, now: datetime, seconds: float = SESSION_SECONDS) -> bool:
    """Take the lease of the cluster's watch of `resource` unless a live one is held: one
    watcher per cluster and resource."""
    KubeWatch.objects.get_or_create(cluster_id=cluster_id, resource=resource)
    free = Q(leased_until__isnull=True) | Q(leased_until__lt=now)
    until = now + timedelta(seconds=seconds) + LEASE_MARGIN
    taken = KubeWatch.objects.filter(free, cluster_id=cluster_id, resource=resource)
    return bool(taken.update(leased_until=until))


def renew(cluster_id: int, resource: str, now: datetime, seconds: float) -> None:
    until = now + timedelta(seconds=seconds + SESSION_SECONDS) + LEASE_MARGIN
    KubeWatch.objects.filter(cluster_id=cluster_id, resource=resource).update(leased_until=until)


def release(cluster_id: int, resource: str) -> None:
    KubeWatch.objects.filter(cluster_id=cluster_id, resource=resource).update(leased_until=None)


def watched_cluster(cluster_id: int) -> Cluster | None:
    return watchable_clusters().filter(pk=cluster_id).first()


def _first_lists_done(cluster: Cluster, watched: Watched) -> bool:
    """Whether the resources `watched` is listed after have been listed (or it has been)."""
    if not watched.listed_after:
        return True
    states = KubeWatch.objects.filter(cluster=cluster).exclude(resource_version="")
    listed = set(states.values_list("resource", flat=True))
    return watched.resource in listed or listed.issuperset(watched.listed_after)


def run_session(
    cluster_id: int, resource: str, timeout_seconds: int = SESSION_SECONDS
) -> float | None:
    """One session for the watch task: seconds until the next one; None: stop watching."""
    cluster = watched_cluster(cluster_id)
    if cluster is None:
        return None
    if not _first_lists_done(cluster, WATCHED[resource]):
        return RETRY_SECONDS
    try:
        with api_client(cluster) as api:
            session = watch_resource(cluster, api, WATCHED[resource], timeout_seconds)
            if resource == WORKLOADS.resource:
                # Twice the session: lines logged while the last one ran are read again (and
                # recorded once), not lost between sessions.
                since = 2 * SESSION_SECONDS
                checkpoints.collect(cluster, api, timezone.now(), since_seconds=since)
    except (KubeError, ApiException, urllib3.exceptions.HTTPError, DatabaseError) as error:
        # A database error too (a deadlock, a dropped connection) ends only this session:
        # raised, it would end the task and leave the watch stopped until its lease expired.
        logger.warning("%s: %s watch failed: %s", cluster.name, resource, error)
        connection.record_error(cluster.pk, resource, error, timezone.now())
        return RETRY_SECONDS
    return RETRY_SECONDS if session.disconnected else 0
