"""A submission asks which of its objects' names already exist in the cluster (whatever their
kind and namespace: services._EXISTING_AND_PRIORITIES) by an index on the cluster's names: the
objects submitted before are not read. Without it every submission read all of its cluster's
objects, a cost that grew with the cluster's history (issue 15).

Shown by the database's plan of the query as a submission runs it, not by timing it: on SQLite
the index searched and the columns it is searched by, on PostgreSQL the index and the pages
the query read with a long history and with none."""

from __future__ import annotations

from typing import Any

from django.db import connection

from clusters.models import Cluster
from tests.plans import nodes, pages, plan_of, statements_of
from tests.support import NAMESPACE, at, job
from workloads import services
from workloads.models import KubeObject

HISTORY = 3000


def test_a_submission_does_not_read_the_objects_submitted_before_it(gpu_queues):
    first = lookup_plan(gpu_queues, "first")
    KubeObject.objects.bulk_create(
        KubeObject(
            cluster=gpu_queues,
            api_version="batch/v1",
            kind="Job",
            namespace=NAMESPACE,
            name=f"old-{i}",
            manifest={},
            created_at=at(),
            updated_at=at(),
        )
        for i in range(HISTORY)
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE workloads_kubeobject")  # as a server's statistics choose
    later = lookup_plan(gpu_queues, "later")

    if connection.vendor == "sqlite":
        index = "COVERING INDEX kube_object_name_idx (cluster_id=? AND name=?)"
        assert [step for step in later if "workloads_kubeobject" in step] == [
            f"SEARCH workloads_kubeobject USING {index}"
        ]
        assert later == first
    else:
        (scan,) = scans_of(later, "workloads_kubeobject")
        assert scan["Index Name"] == "kube_object_name_idx"
        # The index's levels (one more with the history) and a page of rows, at most; the
        # history alone fills dozens.
        assert pages(scan) <= pages(scans_of(first, "workloads_kubeobject")[0]) + 1 <= 4


def lookup_plan(cluster: Cluster, name: str) -> Any:
    """The plan of the existence query of a submission of Job `name`, as run."""
    statements = statements_of(
        lambda: services.apply(cluster, job(name), source="w.yaml", now=at(), namespace=NAMESPACE)
    )
    ((sql, params),) = [(s, p) for s, p in statements if "workloads_priorityclass" in s]
    return plan_of(sql, params)


def scans_of(node: dict[str, Any], table: str) -> list[dict[str, Any]]:
    """The plan's nodes that read `table`."""
    return [n for n in nodes(node) if n.get("Relation Name") == table]
