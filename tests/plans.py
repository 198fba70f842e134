"""The database's plans of the statements code runs, for tests that show a query reads by an
index rather than timing it: the statements captured as run, SQLite's plan steps or
PostgreSQL's plan with the pages each node read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection


def statements_of(call: Callable[[], Any]) -> list[tuple[str, Any]]:
    """The statements (SQL and parameters) `call` ran, in order."""
    statements = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        call()
    return statements


def plan_of(sql: str, params: Any) -> Any:
    """On SQLite the statement's plan steps; on PostgreSQL its top node, run (ANALYZE) with the
    pages it read (BUFFERS)."""
    explain = (
        "EXPLAIN QUERY PLAN"
        if connection.vendor == "sqlite"
        else "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)"
    )
    with connection.cursor() as cursor:
        cursor.execute(f"{explain} {sql}", params)
        found = cursor.fetchall()
    if connection.vendor == "sqlite":
        return [detail for *_, detail in found]
    return found[0][0][0]["Plan"]


def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    """A PostgreSQL plan node and all below it."""
    return [node, *(n for child in node.get("Plans", ()) for n in nodes(child))]


def pages(node: dict[str, Any]) -> int:
    """Buffer pages a PostgreSQL plan node (its children included) read, cached or not."""
    return node["Shared Hit Blocks"] + node["Shared Read Blocks"]
