"""The tables every submission and every admission run write carry no index twice. Each
insert, and on PostgreSQL each update that changes an indexed column, writes an entry in every
index of the table, and Django adds indexes of its own: one per foreign key, and two per
`db_index` text field on PostgreSQL (a plain one and one for LIKE), which can duplicate an index
declared in Meta.

Only an index on exactly the same columns counts as a duplicate, not one whose columns begin
another's: SQLite ends every index with the rowid, so an index on (cluster) finds
`cluster = ? AND rowid IN (...)` by seeks where (cluster, evicting) scans the whole cluster.
Dropping the workloads' own cluster index (tried, measured, undone) made
`snapshot.rows_to_write` four times slower and Kueue's baseline suite 17-20% slower. A unique
index enforces something and a partial one is smaller than any full one: neither is ever a
duplicate."""

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


def duplicates(found: dict[str, Index]) -> list[str]:
    """Each index that another one on the same columns makes useless, with that other."""
    return sorted(
        f"{name} {columns} duplicates {other}"
        for name, (columns, unique, partial) in found.items()
        if not unique and not partial
        for other, (other_columns, _, other_partial) in found.items()
        if other != name and not other_partial and other_columns == columns
    )


@pytest.mark.django_db
@pytest.mark.parametrize("table", BUSY_TABLES)
def test_no_index_of_a_busy_table_is_there_twice(table: str) -> None:
    found = indexes(table)
    assert found, f"{table} has no index at all: the table or the query is wrong"
    assert duplicates(found) == []


def test_an_index_on_the_same_columns_as_another_is_a_duplicate_unless_unique_or_partial() -> None:
    found: dict[str, Index] = {
        "by_cluster": (("cluster_id",), False, False),
        "by_cluster_and_name": (("cluster_id", "name"), True, False),
        "by_kind": (("kind",), False, False),
        "by_kind_for_like": (("kind",), False, False),
        "unnumbered": (("id",), False, True),
        "pkey": (("id",), True, False),
        "name_unique": (("cluster_id", "name"), True, False),
    }
    assert duplicates(found) == [
        "by_kind ('kind',) duplicates by_kind_for_like",
        "by_kind_for_like ('kind',) duplicates by_kind",
    ]
