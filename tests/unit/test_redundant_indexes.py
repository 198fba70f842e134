"""The tables every submission and every admission run write carry no index that another of
their indexes already serves. Each insert, and on PostgreSQL each update that changes an
indexed column, writes an entry in every index of the table, and Django gives every foreign key
(and every `db_index` field, twice on PostgreSQL for text) an index of its own, which a
composite index or unique constraint that begins with the same column makes useless.

An index is served by another when the other's columns begin with all of its own, in order,
and the other covers every row. A unique index enforces something and a partial one is smaller
than any full one: neither is ever redundant."""

from __future__ import annotations

import pytest
from django.db import connection

# Written at every submission, admission, pod start, finish and checkpoint.
BUSY_TABLES = (
    "events_event",
    "workloads_checkpoint",
    "workloads_kubeobject",
    "workloads_pod",
    "workloads_workload",
    "workloads_workloadchange",
)

Index = tuple[tuple[str, ...], bool, bool]  # columns, unique, partial

POSTGRESQL_INDEXES = """
SELECT i.relname, array_agg(a.attname ORDER BY k.ord), x.indisunique, x.indpred IS NOT NULL
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
WHERE x.indrelid = %s::regclass
GROUP BY i.relname, x.indisunique, x.indpred
"""


def indexes(table: str) -> dict[str, Index]:
    """The table's indexes by name, as the database holds them."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(POSTGRESQL_INDEXES, [table])
            return {
                name: (tuple(columns), unique, partial)
                for name, columns, unique, partial in cursor.fetchall()
            }
        cursor.execute(f'PRAGMA index_list("{table}")')
        listed = [(name, bool(unique), bool(partial)) for _, name, unique, _, partial in cursor]
        found = {}
        for name, unique, partial in listed:
            cursor.execute(f'PRAGMA index_info("{name}")')
            columns = tuple(column for _, _, column in sorted(cursor.fetchall()))
            found[name] = (columns, unique, partial)
        return found


def served_by_another(found: dict[str, Index]) -> list[str]:
    """Each index another one serves, with that other."""
    return sorted(
        f"{name} {columns} is served by {other} {other_columns}"
        for name, (columns, unique, partial) in found.items()
        if not unique and not partial
        for other, (other_columns, _, other_partial) in found.items()
        if other != name and not other_partial and other_columns[: len(columns)] == columns
    )


@pytest.mark.django_db
@pytest.mark.parametrize("table", BUSY_TABLES)
def test_no_index_of_a_busy_table_is_served_by_another(table: str) -> None:
    found = indexes(table)
    assert found, f"{table} has no index at all: the table or the query is wrong"
    assert served_by_another(found) == []


def test_an_index_leading_a_longer_one_is_served_by_it_unless_unique_or_partial() -> None:
    found: dict[str, Index] = {
        "by_cluster": (("cluster_id",), False, False),
        "by_cluster_and_name": (("cluster_id", "name"), True, False),
        "by_kind": (("kind",), False, False),
        "by_kind_too": (("kind",), False, False),
        "unnumbered": (("id",), False, True),
        "pkey": (("id",), True, False),
        "recent_by_cluster": (("cluster_id", "at"), False, True),
    }
    assert served_by_another(found) == [
        "by_cluster ('cluster_id',) is served by by_cluster_and_name ('cluster_id', 'name')",
        "by_kind ('kind',) is served by by_kind_too ('kind',)",
        "by_kind_too ('kind',) is served by by_kind ('kind',)",
    ]
