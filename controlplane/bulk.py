"""Many rows written in a few statements, from plain tuples rather than model instances.

Django's `bulk_update` builds a CASE expression per field, which both databases evaluate slowly
on JSON columns: `update_rows` joins the new values in with `UPDATE ... FROM (VALUES ...)`
(PostgreSQL, SQLite >= 3.33) instead. `bulk_create` builds a model instance per row and
compiles each value through the ORM: `insert_rows` binds the values straight away.
Neither sends signals nor calls `save()` or `pre_save()`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model

# A statement's size stays bounded whatever the database allows.
MAX_ROWS_PER_STATEMENT = 1000
POSTGRESQL_MAX_PARAMS = 65535  # its protocol counts parameters in 16 bits


def update_rows(
    model: type[Model], key: str, fields: Sequence[str], rows: Iterable[Sequence[Any]]
) -> int:
    """Each row of `model` whose `key` field (a name, or "pk") equals a tuple's first item gets
    the tuple's other items as its `fields` (keys unique: which of two would win is undefined).
    Returns how many rows were updated."""
    columns = [_column(model, name) for name in (key, *fields)]
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    values = [_value(field, number) for number, field in enumerate(columns, start=1)]
    assignments = ", ".join(
        f"{quote(_name(field))} = {value}"
        for field, value in zip(columns[1:], values[1:], strict=True)
    )
    return _execute(
        columns,
        rows,
        lambda rows_sql: (
            f"UPDATE {table} SET {assignments} FROM ({rows_sql}) AS v "  # noqa: S608 (quoted)
            f"WHERE {table}.{quote(_name(columns[0]))} = {values[0]}"
        ),
    )[0]


def insert_rows(model: type[Model], fields: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """New rows of `model`, each tuple its values of `fields`; the other fields (the primary key
    aside) take their defaults, evaluated once for all rows. Returns how many were inserted."""
    return _insert(model, fields, rows, returning=False)[0]


def insert_rows_returning_pks(
    model: type[Model], fields: Sequence[str], rows: Iterable[Sequence[Any]]
) -> list[Any]:
    """`insert_rows`, returning the new rows' primary keys in the order of `rows` (both
    databases return a multi-row INSERT's rows in VALUES order, as `bulk_create` relies on)."""
    return _insert(model, fields, rows, returning=True)[1]


def _insert(
    model: type[Model], fields: Sequence[str], rows: Iterable[Sequence[Any]], *, returning: bool
) -> tuple[int, list[Any]]:
    named = [_column(model, name) for name in fields]
    defaults = [
        field
        for field in model._meta.concrete_fields
        if field not in named and not field.primary_key
    ]
    default_values = tuple(field.get_default() for field in defaults)
    columns = [*named, *defaults]
    quote = connection.ops.quote_name
    names = ", ".join(quote(_name(field)) for field in columns)
    table = quote(model._meta.db_table)
    suffix = f" RETURNING {quote(_name(model._meta.pk))}" if returning else ""
    return _execute(
        columns,
        ((*row, *default_values) for row in rows),
        lambda rows_sql: f"INSERT INTO {table} ({names}) {rows_sql}{suffix}",
        returning=returning,
    )


def _execute(
    columns: Sequence[Field[Any, Any]],
    rows: Iterable[Sequence[Any]],
    statement: Callable[[str], str],
    *,
    returning: bool = False,
) -> tuple[int, list[Any]]:
    """`statement` around a VALUES list of `rows`, in chunks: the number of rows it changed,
    and the first column of what it returned (with `returning`)."""
    rows = list(rows)
    placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    per_statement = max(1, min(MAX_ROWS_PER_STATEMENT, _max_params() // len(columns)))
    prepare = _Preparer(columns)
    changed, returned = 0, []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            params = [value for row in chunk for value in prepare(row)]
            cursor.execute(statement("VALUES " + ", ".join([placeholders] * len(chunk))), params)
            if returning:  # fetched first: SQLite counts a RETURNING statement's rows as read
                returned += [value for (value,) in cursor.fetchall()]
                changed = len(returned)
            else:
                changed += cursor.rowcount
    return changed, returned


class _Preparer:
    """A row's values as the database takes them (`Field.get_db_prep_save`). A column repeats
    values (one timestamp, a phase, NULL) and preparing one costs microseconds: each distinct
    value of a column is prepared once."""

    def __init__(self, columns: Sequence[Field[Any, Any]]) -> None:
        self.columns = columns
        self.prepared: list[dict[tuple[type, Any], Any]] = [{} for _ in columns]

    def __call__(self, row: Sequence[Any]) -> list[Any]:
        values = []
        for field, prepared, value in zip(self.columns, self.prepared, row, strict=True):
            key = (type(value), value)  # by type too: True and 1 are equal, their JSON is not
            try:
                values.append(prepared[key])
            except KeyError:
                values.append(prepared.setdefault(key, field.get_db_prep_save(value, connection)))
            except TypeError:  # unhashable: a JSON object or array
                values.append(field.get_db_prep_save(value, connection))
        return values


def _column(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    assert isinstance(field, Field), f"{name} is no field of {model.__name__}"
    return field


def _name(field: Field[Any, Any]) -> str:
    assert field.column is not None, f"{field.name} is not a column"
    return field.column


def _value(field: Field[Any, Any], number: int) -> str:
    """The VALUES list's column for `field` (both databases name them column1, column2, ...)."""
    reference = f"v.column{number}"
    if connection.vendor == "postgresql":
        # PostgreSQL types a VALUES column from its rows: NULLs or plain strings come out as
        # text, which does not assign to jsonb or timestamp columns.
        return f"CAST({reference} AS {field.cast_db_type(connection)})"
    return reference


def _max_params() -> int:
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        limit: int = connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        return limit
    return POSTGRESQL_MAX_PARAMS
