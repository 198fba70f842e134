"""Many rows written in a few statements, from plain tuples rather than model instances.

Django's `bulk_update` builds a CASE expression per field, which both databases evaluate slowly
on JSON columns: `update_rows` joins the new values in with `UPDATE ... FROM (VALUES ...)`
(PostgreSQL, SQLite >= 3.33) instead. `bulk_create` builds a model instance per row and
compiles each value through the ORM: `insert_rows` binds the values straight away, and `create`
inserts instances so. None sends signals or calls `save()`; only `create` calls `pre_save()`.

On PostgreSQL the rows (two or more) go as one array per column, `unnest`ed (as
`bulk_create` does since Django 5.2): a statement has a parameter per column rather than per
value, which psycopg composes without scanning a query of thousands of placeholders, and the
arrays' types make casts needless. From `COPY_MIN_ROWS` rows on, they go by COPY, cheaper
still (psycopg formats the rows in C): straight into the table for `insert_rows`, into a
temporary table that one UPDATE joins in for `update_rows`. COPY goes past Django's cursor
wrapper: its statements are not in `connection.queries` (the UPDATE is).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import (
    AutoField,
    BigAutoField,
    BooleanField,
    CharField,
    Field,
    ForeignKey,
    Model,
    SmallAutoField,
    TextField,
)
from django.db.models.expressions import Combinable, RawSQL
from psycopg.adapt import PyFormat, Transformer
from psycopg.types.json import Jsonb
from psycopg.types.numeric import Int2, Int4, Int8

# A statement's size stays bounded whatever the database allows.
MAX_ROWS_PER_STATEMENT = 1000
POSTGRESQL_MAX_PARAMS = 65535  # its protocol counts parameters in 16 bits
# PostgreSQL: writing this many rows or more by COPY beats `unnest` (it creates and drops a
# temporary table for an update: a few milliseconds).
COPY_MIN_ROWS = 500
COPY_TABLE = "pg_temp.accelplane_bulk_rows"


def update_rows(
    model: type[Model], key: str, fields: Sequence[str], rows: Iterable[Sequence[Any]]
) -> int:
    """Each row of `model` whose `key` field (a name, or "pk") equals a tuple's first item gets
    the tuple's other items as its `fields` (keys unique: which of two would win is undefined).
    Returns how many rows were updated."""
    columns = [_column(model, name) for name in (key, *fields)]
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)

    def statement(rows_sql: str, typed: bool) -> str:
        values = [_value(field, number, typed) for number, field in enumerate(columns, start=1)]
        assignments = ", ".join(
            f"{quote(_name(field))} = {value}"
            for field, value in zip(columns[1:], values[1:], strict=True)
        )
        return (
            f"UPDATE {table} SET {assignments} FROM ({rows_sql}) AS v "  # noqa: S608 (quoted)
            f"WHERE {table}.{quote(_name(columns[0]))} = {values[0]}"
        )

    return _execute(columns, rows, statement)[0]


def insert_rows(model: type[Model], fields: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """New rows of `model`, each tuple its values of `fields`; the other fields (the primary key
    aside) take their defaults, evaluated once for all rows. Returns how many were inserted."""
    return _insert(model, fields, rows, returning=False)[0]


def insert_rows_returning_pks(
    model: type[Model], fields: Sequence[str], rows: Iterable[Sequence[Any]]
) -> list[Any]:
    """`insert_rows`, returning the new rows' primary keys in the order of `rows` (both
    databases return a multi-row INSERT's rows in VALUES order, PostgreSQL its `unnest`'s rows
    in array order, as `bulk_create` relies on). Never by COPY, which returns nothing."""
    return _insert(model, fields, rows, returning=True)[1]


def create(objs: Sequence[Model]) -> None:
    """`bulk_create` of new instances of one model with an automatic primary key (any key
    they hold is replaced), their values bound as `insert_rows` binds them: each gets its
    primary key and is marked saved, as `bulk_create` marks it. Compiling each value through
    the ORM took most of an apply's inserts."""
    if not objs:
        return
    model = type(objs[0])
    fields = [field for field in model._meta.concrete_fields if not field.primary_key]
    # `pre_save` as `bulk_create` calls it: a field's value as saved (auto_now's time, say).
    rows = [[field.pre_save(obj, True) for field in fields] for obj in objs]
    pks = insert_rows_returning_pks(model, [field.name for field in fields], rows)
    alias = connection.alias
    for obj, pk in zip(objs, pks, strict=True):
        obj.pk = pk
        obj._state.adding, obj._state.db = False, alias


def update_keys(model: type[Model], key: str, keys: Collection[int], **values: Any) -> int:
    """`model.objects.filter(<key>__in=keys).update(**values)` for plain values (no
    expressions; a foreign key's by its id or None), integer keys: the statement is written
    here, the values prepared by their fields and the keys bound as one parameter
    (`key_table`). The ORM took a millisecond to build such an UPDATE, twenty times what the
    database took to run it. Returns how many rows were updated."""
    if not keys:
        return 0
    assert not any(isinstance(v, (Model, Combinable)) for v in values.values()), values
    db = connections[DEFAULT_DB_ALIAS]
    quote = db.ops.quote_name
    columns = [_column(model, name) for name in values]
    assignments = ", ".join(f"{quote(_name(field))} = %s" for field in columns)
    params = [
        _ready(field.get_db_prep_save(value, db), None)
        for field, value in zip(columns, values.values(), strict=True)
    ]
    table, keys_param = key_table(keys, "bigint", db)
    with transaction.mark_for_rollback_on_error(), db.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(model._meta.db_table)} SET {assignments} "  # noqa: S608 (quoted)
            f"WHERE {quote(_name(_column(model, key)))} IN (SELECT value FROM {table})",
            [*params, keys_param],
        )
        changed: int = cursor.rowcount
    return changed


def key_set(keys: Collection[int]) -> RawSQL:
    """`field__in=key_set(keys)`: integer keys as one parameter. A plain list of thousands
    costs more to compile than to query: Django prepares each key, and psycopg composes a
    placeholder each."""
    table, param = key_table(keys, "bigint")
    return RawSQL(f"SELECT value FROM {table}", [param])


def key_table(
    keys: Collection[int] | Collection[str], db_type: str, db: Any = connection
) -> tuple[str, Any]:
    """A table `k` of one column, `value`, holding `keys` (of PostgreSQL type `db_type`), for
    a FROM clause, and its one parameter: an array on PostgreSQL, a JSON array on SQLite (by
    the vendor of `db`, a connection)."""
    if db.vendor == "postgresql":
        return f"unnest(%s::{db_type}[]) AS k (value)", list(keys)
    return "json_each(%s) AS k", json.dumps(list(keys))


def _insert(
    model: type[Model], fields: Sequence[str], rows: Iterable[Sequence[Any]], *, returning: bool
) -> tuple[int, list[Any]]:
    columns, defaults, into = _insert_columns(model, tuple(fields), connection.vendor)
    default_values = tuple(field.get_default() for field in defaults)
    quote = connection.ops.quote_name
    suffix = f" RETURNING {quote(_name(model._meta.pk))}" if returning else ""
    return _execute(
        columns,
        ((*row, *default_values) for row in rows) if default_values else rows,
        lambda rows_sql, _: f"INSERT INTO {into} {rows_sql}{suffix}",
        returning=returning,
        into=into,
    )


@functools.cache
def _insert_columns(
    model: type[Model], fields: tuple[str, ...], vendor: str
) -> tuple[tuple[Field[Any, Any], ...], tuple[Field[Any, Any], ...], str]:
    """An insert's columns: `fields`, then the others but the primary key (which take their
    defaults), those others, and the table with its columns as INSERT names them. Worked out
    once per model and fields (the same few a process writes over and over): a submission
    spent more time finding its inserts' default columns than its database inserting them."""
    named = [_column(model, name) for name in fields]
    defaults = tuple(
        field
        for field in model._meta.concrete_fields
        if field not in named and not field.primary_key
    )
    columns = (*named, *defaults)
    quote = connection.ops.quote_name
    names = ", ".join(quote(_name(field)) for field in columns)
    return columns, defaults, f"{quote(model._meta.db_table)} ({names})"


def _execute(
    columns: Sequence[Field[Any, Any]],
    rows: Iterable[Sequence[Any]],
    statement: Callable[[str, bool], str],
    *,
    returning: bool = False,
    into: str = "",
) -> tuple[int, list[Any]]:
    """`statement` around a query of `rows` (`column1`, `column2`, ...; typed as `columns` if
    its second argument is true), in chunks: the number of rows it changed, and the first
    column of what it returned (with `returning`). `into`, a table and its columns: by COPY
    there instead, when COPY is worth it."""
    rows = list(rows)
    if not rows:
        return 0, []
    types = _array_types(columns)
    if types and not returning and len(rows) >= COPY_MIN_ROWS:
        return _copy(types, columns, rows, statement, into), []
    values = _prepared(columns, rows)
    if types and len(rows) == 1:
        types = None  # plain VALUES: psycopg dumps a value faster than a one-element array
    if types:
        per_statement = MAX_ROWS_PER_STATEMENT
        arrays = ", ".join(f"%s::{db_type}[]" for db_type in types)
        names = ", ".join(f"column{number}" for number in range(1, len(columns) + 1))
        sql = statement(f"SELECT * FROM unnest({arrays}) AS u ({names})", True)  # noqa: S608
    else:
        per_statement = max(1, min(MAX_ROWS_PER_STATEMENT, _max_params() // len(columns)))
        placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    changed, returned = 0, []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            chunk = [column[start : start + per_statement] for column in values]
            if types:
                params = chunk
            else:
                params = [value for row in zip(*chunk, strict=True) for value in row]
                sql = statement("VALUES " + ", ".join([placeholders] * len(chunk[0])), False)
            cursor.execute(sql, params)
            if returning:  # fetched first: SQLite counts a RETURNING statement's rows as read
                returned += [value for (value,) in cursor.fetchall()]
                changed = len(returned)
            else:
                changed += cursor.rowcount
    return changed, returned


def _copy(
    types: Sequence[str],
    columns: Sequence[Field[Any, Any]],
    rows: Sequence[Sequence[Any]],
    statement: Callable[[str, bool], str],
    into: str,
) -> int:
    """`rows` by COPY `into` a table, or else into a temporary one (of `types`) that
    `statement` reads. Returns how many rows were written (`into`) or changed."""
    if into:
        with connection.cursor() as cursor:
            return _copy_rows(cursor, into, columns, rows)
    names = [f"column{number}" for number in range(1, len(types) + 1)]
    table = ", ".join(f"{name} {db_type}" for name, db_type in zip(names, types, strict=True))
    # Gone at the commit even if a statement fails (its error aborts the transaction anyway).
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMPORARY TABLE {COPY_TABLE} ({table}) ON COMMIT DROP")
        _copy_rows(cursor, f"{COPY_TABLE} ({', '.join(names)})", columns, rows)
        cursor.execute(statement(f"SELECT * FROM {COPY_TABLE}", True))  # noqa: S608 (ours)
        changed: int = cursor.rowcount
        cursor.execute(f"DROP TABLE {COPY_TABLE}")
    return changed


def _copy_rows(
    cursor: Any, into: str, columns: Sequence[Field[Any, Any]], rows: Sequence[Sequence[Any]]
) -> int:
    """psycopg's COPY on Django's cursor's own (text format: each value as psycopg dumps it
    for a query, its type left to the column)."""
    values = _prepared(columns, rows, _copy_text(cursor.cursor))
    with cursor.cursor.copy(f"COPY {into} FROM STDIN") as copy:
        for row in zip(*values, strict=True):
            copy.write_row(row)
    return len(rows)


def _copy_text(cursor: Any) -> Callable[[Any], Any]:
    """A prepared value as COPY's text format takes it: psycopg's text of it, which its COPY
    would write for the value itself. Made once for the rows sharing a value: dumping a
    timestamp or JSON costs psycopg a microsecond, writing text a tenth of that. Values it
    writes as fast as text (NULL, text, integers as Django's integer fields give them,
    booleans) stay as they are."""
    transformer = Transformer.from_context(cursor)
    encoding = cursor.connection.info.encoding

    def text(value: Any) -> Any:
        if value is None or type(value) in _COPIED_AS_IS:
            return value
        dumped = transformer.get_dumper(value, PyFormat.TEXT).dump(value)
        return None if dumped is None else bytes(dumped).decode(encoding)

    return text


_COPIED_AS_IS = frozenset({str, int, bool, Int2, Int4, Int8})


def _prepared(
    columns: Sequence[Field[Any, Any]],
    rows: Sequence[Sequence[Any]],
    dump: Callable[[Any], Any] | None = None,
) -> list[list[Any]]:
    """The values of each column (`rows` being tuples of `columns`' values) as the database
    takes them (`Field.get_db_prep_save`), each passed through `dump` if given."""
    # The connection itself: each attribute of the `connection` proxy is a look-up in
    # thread-local (asgiref) storage, which preparing a value makes a few of.
    db = connections[DEFAULT_DB_ALIAS]
    return [
        _prepared_column(field, values, db, dump)
        for field, values in zip(columns, zip(*rows, strict=True), strict=True)
    ]


def _prepared_column(
    field: Field[Any, Any], values: Sequence[Any], db: Any, dump: Callable[[Any], Any] | None
) -> list[Any]:
    """A column repeats values (one timestamp, a phase, NULL, an event's data) and preparing
    one costs microseconds: each distinct value is prepared once, and a column of values its
    field takes as they are (`_as_is`: names, messages, keys) is not gone through at all."""
    if set(map(type, values)) <= _as_is(field):
        return list(values)
    prepared: dict[Any, Any] = {}
    column = []
    for value in values:
        kind = type(value)  # in the key: True and 1 are equal, their JSON is not
        key = _json_key(value) if kind is dict or kind is list else (kind, value)
        try:
            result = prepared.get(key, _UNPREPARED)
        except TypeError:  # unhashable: a tuple holding a JSON object, say
            result = _ready(field.get_db_prep_save(value, db), dump)
        else:
            if result is _UNPREPARED:
                result = prepared[key] = _ready(field.get_db_prep_save(value, db), dump)
        column.append(result)
    return column


def _as_is(field: Field[Any, Any]) -> frozenset[type]:
    """The types of value `field` prepares by giving them back unchanged (Django's fields of
    those classes; a subclass may convert them)."""
    if type(field) is ForeignKey:  # its key's own, but that "" may become NULL
        return _AS_IS.get(type(field.target_field), frozenset()) - {str}
    return _AS_IS.get(type(field), frozenset())


_TEXT, _INTEGER = frozenset({str}), frozenset({int})
_AS_IS: dict[type, frozenset[type]] = {
    CharField: _TEXT,
    TextField: _TEXT,
    BooleanField: frozenset({bool}),
    # Not the other integer fields: on PostgreSQL they wrap integers in psycopg's types.
    AutoField: _INTEGER,
    BigAutoField: _INTEGER,
    SmallAutoField: _INTEGER,
}
_UNPREPARED = object()
# A JSON object or array of these (keys and values) is told by their values and types alone
# (not float: 0.0 and -0.0 are equal, their JSON is not).
_JSON_SCALARS = frozenset({str, int, bool, type(None)})


def _json_key(value: dict[Any, Any] | list[Any]) -> Any:
    """A JSON object or array of scalars (an event's data) by its content; any other by
    identity, which is sound as `_execute` holds every row (no object goes and lends its id to
    another meanwhile): rows that share one (an admission, a pod's spec) share its encoding."""
    items = (*value, *value.values()) if isinstance(value, dict) else tuple(value)
    types = tuple(map(type, items))
    if not _JSON_SCALARS.issuperset(types):
        return id(value)
    return type(value), items, types


def _ready(prepared: Any, dump: Callable[[Any], Any] | None) -> Any:
    """A prepared value through `dump`; without, a JSON value as psycopg takes it (`Jsonb`),
    encoded now: psycopg encodes its object each time it is sent, so rows sharing one would
    each encode it again."""
    if dump is not None:
        return dump(prepared)
    if not isinstance(prepared, Jsonb) or prepared.dumps is None:
        return prepared
    data = prepared.dumps(prepared.obj)
    encoded = data.encode() if isinstance(data, str) else data
    return Jsonb(prepared.obj, dumps=lambda _: encoded)


def _column(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    assert isinstance(field, Field), f"{name} is no field of {model.__name__}"
    return field


def _name(field: Field[Any, Any]) -> str:
    assert field.column is not None, f"{field.name} is not a column"
    return field.column


def _value(field: Field[Any, Any], number: int, typed: bool) -> str:
    """The VALUES list's column for `field` (both databases name them column1, column2, ...)."""
    reference = f"v.column{number}"
    if connection.vendor == "postgresql" and not typed:
        # PostgreSQL types a VALUES column from its rows: NULLs or plain strings come out as
        # text, which does not assign to jsonb or timestamp columns.
        return f"CAST({reference} AS {field.cast_db_type(connection)})"
    return reference


def _array_types(columns: Sequence[Field[Any, Any]]) -> Sequence[str] | None:
    """On PostgreSQL, the type of each column's array; None on SQLite, or where a field's type
    is no plain one (an array type, say: `unnest` would flatten an array of arrays). As
    Django's own `InsertUnnest` (postgresql/compiler.py) decides, which relies as this does on
    a column's prepared values being all of one Python type (psycopg refuses a mixed list)."""
    if connection.vendor != "postgresql":
        return None
    return _postgresql_array_types(tuple(columns))


@functools.cache
def _postgresql_array_types(columns: tuple[Field[Any, Any], ...]) -> tuple[str, ...] | None:
    """`_array_types` on PostgreSQL, once per set of columns: a field's type is its class's."""
    types = []
    for field in columns:
        target = field.target_field if isinstance(field, ForeignKey) else field
        db_type = field.db_type(connection)
        if (
            db_type is None
            or "[" in db_type
            or hasattr(field, "get_placeholder")
            or target.get_internal_type() not in connection.data_types
        ):
            return None
        types.append(db_type.split("(")[0])  # varchar, not varchar(253): no silent truncation
    return tuple(types)


def _max_params() -> int:
    if connection.vendor != "sqlite":
        return POSTGRESQL_MAX_PARAMS
    global _sqlite_max_params
    if _sqlite_max_params is None:
        # The library's compiled-in limit, which Django never lowers on a connection: asked
        # once.
        connection.ensure_connection()
        _sqlite_max_params = connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    return _sqlite_max_params


_sqlite_max_params: int | None = None
