"""Queries the ORM builds once and runs again with new parameters.

Building a statement took Django about a millisecond (filters resolved, joins set up, the SQL
compiled), often ten times what the database took to answer it, and the simulated cluster and
admission run the same few statements at every step. A `Prepared` query is a `values_list`
queryset with `Param`s where its values change: its first run on a connection compiles it, as
the ORM would, and every run binds its parameters to that SQL and converts the rows with the
compiler's own converters (JSON decoded, SQLite's datetimes made aware), as iterating the
queryset would.

    _DUE = Prepared(
        lambda: Pod.objects.filter(cluster_id=Param("cluster"), ready_at__lte=Param("now", at))
        .values_list("pk", "owner_id")
    )
    rows = _DUE.rows(cluster=cluster.pk, now=now)

A parameter holds a plain value, prepared by the field it is given (a datetime for SQLite, say),
or a collection of keys (`Keys`, for `field__in=Keys("name")`), bound as one array or JSON
parameter whatever their number (`bulk.key_table`). Django's connections are per thread: a
statement is compiled once per process and database alias, and each thread converts its rows
with a copy of the compiler bound to its own connection. (Under ASGI every request runs in a
thread of its own: compiled per connection, a submission's statements were compiled again by
every request, a tenth of a web process's time.)
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import BigIntegerField, Field, QuerySet, TextField
from django.db.models.expressions import Expression
from django.db.models.query import FlatValuesListIterable, ValuesListIterable
from django.db.models.sql.compiler import SQLCompiler

from controlplane import bulk


class Param(Expression):
    """A value bound at each run of a `Prepared` query, prepared by `field` if it is given
    (else bound as it is: text, integers, booleans)."""

    def __init__(self, name: str, field: Field[Any, Any] | None = None):
        super().__init__(output_field=field)
        self.name, self.prepared_by = name, field

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        return "%s", (self,)

    def bind(self, value: Any, connection: Any) -> Any:
        if self.prepared_by is None:
            return value
        return self.prepared_by.get_db_prep_value(value, connection, prepared=False)


class Keys(Param):
    """`field__in=Keys("name")`: a collection of keys (integers; text with `text=True`),
    bound as one parameter."""

    def __init__(self, name: str, *, text: bool = False):
        super().__init__(name, TextField() if text else BigIntegerField())
        self.db_type = "text" if text else "bigint"

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        table, _ = bulk.key_table((), self.db_type, connection)  # the keys are bound each run
        return f"(SELECT value FROM {table})", (self,)

    def bind(self, value: Collection[Any], connection: Any) -> Any:
        return bulk.key_table(value, self.db_type, connection)[1]


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple[Any, ...]
    """Constants, and the `Param`s to bind."""
    compiler: SQLCompiler
    flat: bool


class Prepared:
    """A `values_list` queryset, built by `build`, compiled on first use on each connection."""

    def __init__(self, build: Callable[[], QuerySet[Any, Any]]):
        self.build = build
        self._local = threading.local()
        self._compiled_for: dict[str, _Compiled] = {}
        """By alias: the first compilation, whichever thread made it."""

    def rows(self, using: str = DEFAULT_DB_ALIAS, **values: Any) -> list[Any]:
        """The rows the queryset would give with its parameters bound to `values`: tuples,
        or single values for `values_list(..., flat=True)`."""
        connection = connections[using]
        compiled = self._compiled(using, connection)
        params = [
            p.bind(values[p.name], connection) if isinstance(p, Param) else p
            for p in compiled.params
        ]
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            fetched = cursor.fetchall()
        rows = compiled.compiler.results_iter(results=[fetched], tuple_expected=True)
        return [row[0] for row in rows] if compiled.flat else list(rows)

    def _compiled(self, using: str, connection: Any) -> _Compiled:
        compiled: _Compiled | None = getattr(self._local, using, None)
        if compiled is not None and compiled.compiler.connection is connection:
            return compiled
        first = self._compiled_for.get(using)
        if first is not None:
            # The SQL is the alias's whatever the connection; the compiler, set up by as_sql
            # and only read since, converts rows with the connection it holds.
            compiler = copy.copy(first.compiler)
            compiler.connection = connection
            compiled = replace(first, compiler=compiler)
            setattr(self._local, using, compiled)
            return compiled
        queryset = self.build()
        flat = queryset._iterable_class is FlatValuesListIterable
        if not flat and queryset._iterable_class is not ValuesListIterable:
            raise TypeError("a prepared query is a values_list() queryset")
        compiler = queryset.query.get_compiler(using=using)
        sql, params = compiler.as_sql()
        if compiler.has_extra_select:
            raise TypeError("a prepared query selects only its values_list() columns")
        compiled = _Compiled(sql, tuple(params), compiler, flat)
        setattr(self._local, using, compiled)
        self._compiled_for.setdefault(using, compiled)  # two threads at once: either will do
        return compiled
