"""Raw SQL for migrations that differs by database (triggers, sequences): a RunPython function
that executes the statements written for the migrating database's vendor."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any


def run_for_vendor(statements: Mapping[str, Sequence[str]]) -> Callable[[Any, Any], None]:
    """`statements` by vendor ("postgresql", "sqlite"), run in order."""

    def run(apps: Any, schema_editor: Any) -> None:
        for statement in statements[schema_editor.connection.vendor]:
            schema_editor.execute(statement)

    return run
