"""On PostgreSQL, parameters are bound by the server and a statement run often on a connection
is prepared there (parsed and planned once); DATABASE_PREPARED_STATEMENTS=false turns both off
for a pooler in transaction mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from clusters.models import Cluster

ROOT = Path(__file__).resolve().parents[2]
FULL_STACK = "postgres://accelplane@db.internal:5432/accelplane"
OPTIONS = (
    "from controlplane import settings; import json; "
    "print(json.dumps(settings.DATABASES['default']['OPTIONS'], default=str))"
)


@pytest.mark.django_db
@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL's prepared statements (CI runs both)"
)
def test_a_statement_run_often_is_prepared_on_its_connection():
    for _ in range(settings.PREPARE_THRESHOLD + 1):
        assert not Cluster.objects.filter(name="prepared-once").exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any('"clusters_cluster"."name" = $' in statement for statement in prepared), prepared


@pytest.mark.parametrize(("setting", "server_side"), [(None, True), ("false", False)])
def test_the_setting_turns_them_off(tmp_path, setting, server_side):
    env = {"PATH": "/usr/bin:/bin", "ACCELPLANE_VAR_DIR": str(tmp_path), "DEBUG": "true"}
    env |= {"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/accelplane"}
    if setting is not None:
        env["DATABASE_PREPARED_STATEMENTS"] = setting
    result = subprocess.run(
        [sys.executable, "-c", OPTIONS], cwd=ROOT, env=env, capture_output=True, text=True
    )
    options = json.loads(result.stdout or "{}")
    assert options.get("server_side_binding", False) is server_side, result.stderr
    assert ("prepare_threshold" in options) is server_side
