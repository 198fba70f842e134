"""PostgreSQL stopped under a running web server: requests fail cleanly (503 with a JSON body,
promptly, never a 500 or a hang), and succeed again once it is back, without a restart of
the web process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from controlplane import run
from tests.integration.servers import PrivatePostgres, web_server
from tests.integration.workers import ROOT

ANSWERED_WITHIN = 5.0  # seconds: a request while the database is down must not hang
RECOVERED_WITHIN = 20.0

MAKE_ADMIN_TOKEN = """
from django.contrib.auth.models import User
from teams.services import issue_token
print(issue_token(User.objects.create_user("root", is_staff=True))[1])
"""


@pytest.fixture
def postgres():
    server = PrivatePostgres()
    try:
        server.init()
        server.start()
        server.createdb("accelplane")
        yield server
    finally:
        server.remove()


def manage(env, *args):
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def get(port, token):
    """(status, JSON body) of GET /api/v1/workloads, with the time it took."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/workloads",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=ANSWERED_WITHIN + 5) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    return status, json.loads(body), time.monotonic() - started


def test_requests_answer_503_while_postgres_is_down_and_recover_after(postgres, tmp_path):
    env = {"DATABASE_URL": postgres.url("accelplane"), "REDIS_URL": ""}
    manage(env, "migrate", "--noinput", "-v", "0")
    token = manage(env, "shell", "--no-imports", "-c", MAKE_ADMIN_TOKEN).strip()
    # make stack's HTTP server: the one that answers the REST API there.
    with web_server(env, tmp_path / "web.log", run.HTTP_SERVER) as port:
        assert get(port, token)[0] == 200

        postgres.stop()
        status, body, seconds = get(port, token)
        assert status == 503, body
        assert "database" in body["detail"].lower()
        assert seconds < ANSWERED_WITHIN

        postgres.start()
        deadline = time.monotonic() + RECOVERED_WITHIN
        while (status := get(port, token)[0]) != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert status == 200
