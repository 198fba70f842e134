"""Production settings (DEBUG off) pass Django's deployment checklist and refuse to start with
a published or weak key; one machine's keys are generated once into var/ (issue 13, finding 6).
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FULL_STACK = "postgres://accelplane@db.internal:5432/accelplane"
IMPORT_SETTINGS = [sys.executable, "-c", "import controlplane.settings"]


@pytest.fixture
def clean_env(tmp_path):
    """The environment of a fresh shell: no keys, no DEBUG, no database; var/ in tmp_path."""
    dropped = ("SECRET_KEY", "ACCELPLANE_ENCRYPTION_KEY", "DEBUG", "DATABASE_URL", "REDIS_URL")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return env | {"ACCELPLANE_VAR_DIR": str(tmp_path / "var")}


def run(command, env):
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("database", ["", FULL_STACK])
def test_production_settings_pass_check_deploy(clean_env, database):
    env = clean_env | {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "accelplane.example.com",
        "DATABASE_URL": database,
    }
    result = run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)
    assert result.returncode == 0, result.stderr


def test_production_refuses_to_start_without_a_secret_key(clean_env):
    result = run(IMPORT_SETTINGS, clean_env | {"DATABASE_URL": FULL_STACK})
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("insecure-embedded-key-set-SECRET_KEY-in-production", "is a published value"),
        ("change-me", "is a published value"),
        ("django-insecure-" + secrets.token_urlsafe(50), "is a published value"),
        ("", "is not set"),
        ("s3cr3t-but-short", "is too short"),
        ("ab" * 40, "is too short"),
    ],
)
@pytest.mark.parametrize("database", ["", FULL_STACK])
def test_production_refuses_a_published_or_weak_secret_key(clean_env, key, problem, database):
    result = run(IMPORT_SETTINGS, clean_env | {"SECRET_KEY": key, "DATABASE_URL": database})
    if not key and not database:
        assert result.returncode == 0, result.stderr  # one machine: generated into var/
        return
    assert result.returncode != 0
    assert f"SECRET_KEY {problem}" in result.stderr
    assert key not in result.stderr or not key


def test_debug_refuses_a_database_on_another_machine(clean_env):
    env = clean_env | {"DEBUG": "true", "SECRET_KEY": "dev", "DATABASE_URL": FULL_STACK}
    result = run(IMPORT_SETTINGS, env)
    assert result.returncode != 0
    assert "db.internal" in result.stderr


def test_an_encryption_key_that_is_not_a_fernet_key_refuses_to_start(clean_env):
    result = run(IMPORT_SETTINGS, clean_env | {"ACCELPLANE_ENCRYPTION_KEY": "change-me"})
    assert result.returncode != 0
    assert "ACCELPLANE_ENCRYPTION_KEY is not a Fernet key" in result.stderr


def test_debug_is_off_unless_set(clean_env):
    show = "import controlplane.settings as s; print(s.DEBUG)"
    result = run([sys.executable, "-c", show], clean_env)
    assert result.stdout.strip() == "False", result.stderr


def test_one_machine_generates_its_keys_once_readable_by_the_owner_only(clean_env):
    show = "import controlplane.settings as s; print(s.SECRET_KEY, s.ACCELPLANE_ENCRYPTION_KEY)"
    first = run([sys.executable, "-c", show], clean_env)
    again = run([sys.executable, "-c", show], clean_env)
    var = Path(clean_env["ACCELPLANE_VAR_DIR"])

    assert first.returncode == 0, first.stderr
    assert first.stdout == again.stdout
    assert first.stdout.split() == [
        (var / "secret-key").read_text(),
        (var / "encryption-key").read_text(),
    ]
    for name in ("secret-key", "encryption-key"):
        assert stat.S_IMODE((var / name).stat().st_mode) == 0o600


def test_compose_requires_the_keys_and_leaves_debug_off():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    environment = compose["x-app"]["environment"]

    assert "DEBUG" not in environment
    assert environment["SECRET_KEY"].startswith("${SECRET_KEY:?")
    assert environment["ACCELPLANE_ENCRYPTION_KEY"].startswith("${ACCELPLANE_ENCRYPTION_KEY:?")


def test_production_refuses_plain_http_api_servers(clean_env):
    """The contract tests' escape hatch (http and loopback API servers) is not for deployments."""
    env = clean_env | {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": FULL_STACK,
        "ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS": "1",
    }
    result = run(IMPORT_SETTINGS, env)
    assert result.returncode != 0
    assert "ACCELPLANE_ALLOW_INSECURE_KUBE_SERVERS" in result.stderr


def test_the_embedded_database_is_crash_safe_and_keeps_temporary_files_in_memory(clean_env):
    """WAL with synchronous=NORMAL: a crash may lose the last commits, never corrupt the file.
    SQLite's statement journals and sorts stay in memory: on disk, an admission run's large
    statements each opened, wrote and deleted a temporary file."""
    pragmas = ("journal_mode", "synchronous", "wal_autocheckpoint", "temp_store")
    read = (
        "import django; django.setup(); from django.db import connection\n"
        "with connection.cursor() as cursor:\n"
        f"    for name in {pragmas!r}:\n"
        "        print(cursor.execute(f'PRAGMA {name}').fetchone()[0])"
    )
    env = clean_env | {"DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    result = run([sys.executable, "-c", read], env)

    assert result.returncode == 0, result.stderr
    # synchronous 1 is NORMAL; temp_store 2 is MEMORY.
    assert result.stdout.split() == ["wal", "1", "10000", "2"]
