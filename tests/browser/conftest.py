"""Playwright in Debian's headless Chromium against daphne serving pytest-django's test database.

Nothing downloads a browser: without /usr/lib/chromium/chromium (apt-get install chromium)
every test here is skipped. The server is one daphne subprocess for the whole run; each test
makes its own rows (transactional database) and drives the simulated clock from this process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection, connections
from django.test import Client
from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHROMIUM = Path("/usr/lib/chromium/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-dev-shm-usage",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCRATCH = Path(tempfile.mkdtemp(prefix="accelplane-browser-"))
ASGI = "controlplane.asgi:application"

# The server is another process: an in-memory SQLite test database would be invisible to it.
_default = connections["default"].settings_dict
if _default["ENGINE"].endswith("sqlite3") and CHROMIUM.exists():
    _default.setdefault("TEST", {})["NAME"] = str(SCRATCH / "test.sqlite3")


def pytest_collection_modifyitems(config, items):
    if CHROMIUM.exists():
        return
    skip = pytest.mark.skip(
        reason=f"browser tests need Debian's Chromium at {CHROMIUM} (apt-get install chromium)"
    )
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(skip)


# Playwright's sync API keeps an asyncio loop marked running in this thread while it is
# started: Django then refuses ORM calls (allowed here for browser tests only), and tests
# elsewhere would see the loop too. So Playwright runs per module, not for the whole session.
@pytest.fixture(scope="module")
def playwright():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "1")
        with sync_playwright() as instance:
            yield instance


@pytest.fixture(scope="module")
def browser_type(playwright):
    return playwright.chromium


@pytest.fixture(scope="module")
def browser(browser_type):
    instance = browser_type.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
    yield instance
    instance.close()


@pytest.fixture(scope="module")
def browser_context_args():
    return {"viewport": {"width": 1280, "height": 900}}


def _database_url():
    settings = connection.settings_dict
    if settings["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{settings['NAME']}"
    url = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(url._replace(path="/" + settings["NAME"]))


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """daphne on the test database (or the server `command(port)` starts, with `extra_env`);
    `stop()` and `start()` again on the same port."""

    def __init__(self, database_url, command=None, extra_env=None):
        self.port = _free_port()
        self.command = command or _daphne
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = None
        env = {**os.environ, "DATABASE_URL": database_url}
        env.pop("REDIS_URL", None)  # the in-process channel layer; no worker: tests drive tasks
        env.update(
            ACCELPLANE_VAR_DIR=str(SCRATCH / "var"),
            ACCELPLANE_EVENTS_POLL_SECONDS="0.2",
            CELERY_TASK_ALWAYS_EAGER="0",
            DEBUG="1",
            **(extra_env or {}),
        )
        self.env = env

    def start(self):
        log = (SCRATCH / "servers.log").open("a")
        self.process = subprocess.Popen(
            self.command(self.port),
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/login/", timeout=2):
                    return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.1)
        pytest.fail(f"{self.command(self.port)} did not start; see {SCRATCH / 'servers.log'}")

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _daphne(port):
    return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), ASGI]


@pytest.fixture(scope="session")
def server(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        instance = Server(_database_url())
    instance.start()
    yield instance
    instance.stop()


@pytest.fixture(scope="session")
def http_server(server):
    """make stack's HTTP server (granian, WSGI) on the test database, its pages sending their
    WebSockets to `server`, as make stack's send theirs to its sockets servers."""
    from controlplane import run

    instance = Server(
        server.env["DATABASE_URL"],
        command=lambda port: run.http_command(str(port)),
        extra_env={"ACCELPLANE_SOCKET_PORTS": str(server.port)},
    )
    instance.start()
    yield instance
    instance.stop()


@pytest.fixture
def log_in(server, context):
    """Sign `user` in: a session made here, its cookie given to the browser."""

    def sign_in(user):
        client = Client()
        client.force_login(user)
        cookie = client.cookies["sessionid"]
        context.add_cookies([{"name": "sessionid", "value": cookie.value, "url": server.url}])

    return sign_in


@pytest.fixture
def gpu_demo(cluster):
    """The GPU seed workflow, running for ten minutes: Deployment `chat` (2 GPUs, high) and
    Job `finetune` (2 pods x 2 GPUs, low, checkpoints every 10 steps) fill 6 GPUs of quota."""
    from datetime import timedelta
    from types import SimpleNamespace

    from django.contrib.auth.models import User
    from django.utils import timezone

    from teams import services as teams
    from tests.support import GPU_QUEUES, deployment, job
    from workloads import admission, services
    from workloads.models import KubeObject

    start = timezone.now() - timedelta(minutes=10)
    services.apply(cluster, GPU_QUEUES, source="queues.yaml", now=start)
    for name, text in (
        ("chat.yaml", deployment("chat", startup="5s")),
        ("finetune.yaml", job("finetune", startup="5s", step_time="5s", checkpoint_every=10)),
    ):
        services.apply(cluster, text, source=name, now=start, namespace="llm")
    admission.advance(cluster, start, timezone.now())
    teams.ensure_team("llm", namespaces=["llm"], members=[("ml-engineer", "submitter")])
    return SimpleNamespace(
        cluster=cluster,
        chat=KubeObject.objects.get(kind="Deployment", name="chat"),
        finetune=KubeObject.objects.get(kind="Job", name="finetune"),
        admin=User.objects.create_superuser("admin", "admin@example.com", "s3cret-pass"),
        member=User.objects.get(username="ml-engineer"),
    )


@pytest.fixture
def admin(db):
    """A platform admin (a superuser)."""
    from django.contrib.auth.models import User

    return User.objects.create_superuser("admin", "admin@example.com", "s3cret-pass")


@pytest.fixture
def provider_worker(settings):
    """Play the worker for the provider operations a form started (the server has none):
    `provider_worker()` finishes every cluster and node pool operation under way."""
    from clusters import services as cluster_services

    settings.ACCELPLANE_SIM_OPERATION_SECONDS = 0

    def finish():
        for pk in cluster_services.provisioning_cluster_ids():
            while not cluster_services.reconcile_cluster(pk).done:
                pass
        for pk in cluster_services.provisioning_node_pool_ids():
            while not cluster_services.reconcile_node_pool(pk).done:
                pass

    return finish


class SimClock:
    """A simulated cluster's clock, driven from the test as Celery beat's tick would:
    `advance(seconds)` runs it ahead of the wall clock, `catch_up()` to the wall clock."""

    def __init__(self, cluster, start):
        self.cluster, self.now = cluster, start

    def advance(self, seconds):
        from datetime import timedelta

        self._to(self.now + timedelta(seconds=seconds))

    def catch_up(self):
        from django.utils import timezone

        self._to(max(self.now, timezone.now()))

    def _to(self, end):
        from workloads import admission

        admission.advance(self.cluster, self.now, end)
        self.now = end


def watch_live(*pages):
    """Wait for each page's live stream, and mark the document so `not_reloaded` can tell."""
    from playwright.sync_api import expect

    for page in pages:
        expect(page.locator("#live-status")).to_have_text("live")
        page.evaluate("window.notReloaded = true")


def not_reloaded(*pages):
    return all(page.evaluate("window.notReloaded === true") for page in pages)


def running(row_locator):
    """A workloads-list row's "Running pods" cell, found by its column's heading."""
    headings = row_locator.page.locator("thead th").all_inner_texts()
    return row_locator.locator("th, td").nth(headings.index("Running pods"))
