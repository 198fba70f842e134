"""Each round asks of every admitted workload whether it has pods and whether they are all
ready (runtime._due: a PodsReady flag flips): answered from `pod_workload_ready_idx` alone,
without reading the pods' rows.

Shown by the database's plan of the statement: on SQLite every look-up of a workload's pods,
on PostgreSQL every scan of the pods (its index-only scans allowed only where the index
serves: a table this small is otherwise read whole)."""

from __future__ import annotations

from typing import Any

from django.db import connection

from tests.plans import nodes, statements_of
from tests.support import NAMESPACE, at, job
from workloads import admission, runtime, services


def test_whether_a_workloads_pods_are_all_ready_is_read_from_an_index_alone(gpu_queues):
    for name in ("first", "second"):
        services.apply(
            gpu_queues, job(name, pods=2, gpus=1), source="w.yaml", now=at(), namespace=NAMESPACE
        )
    admission.advance(gpu_queues, at(), at(seconds=30))  # admitted, pods bound, not yet ready

    pod_reads = reads_of_pods(statement_of(lambda: runtime._due(gpu_queues, at(seconds=30))))

    if connection.vendor == "sqlite":
        search = "SEARCH p USING COVERING INDEX pod_workload_ready_idx (workload_id=?)"
        assert set(pod_reads) == {search}
    else:
        assert set(pod_reads) == {("Index Only Scan", "pod_workload_ready_idx")}


def statement_of(call: Any) -> tuple[str, Any]:
    (statement,) = statements_of(call)
    return statement


def reads_of_pods(statement: tuple[str, Any]) -> list[Any]:
    """The plan's reads of a workload's pods: SQLite's steps, PostgreSQL's (node type, index)."""
    sql, params = statement
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            return [detail for *_, detail in cursor.fetchall() if "workload_id" in detail]
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0][0]["Plan"]
    return [
        (node["Node Type"], node.get("Index Name"))
        for node in nodes(plan)
        if node.get("Relation Name") == "workloads_pod"
        and "workload_id" in node.get("Index Cond", "") + node.get("Filter", "")
    ]
