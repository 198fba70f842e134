"""`make run` stays up: its processes (controlplane.run) under minutes of scripted clicking,
a killed process started again, keys generated once into var/ (issue 13, findings 6 and 9).

The embedded stack is SQLite by definition: skipped when DATABASE_URL names another database
(CI's second run), so CI runs it once. ACCELPLANE_EMBEDDED_LOAD_SECONDS sets how long the
clicking lasts; benchmarks/embedded_soak.py is the 30-minute version.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import time

import pytest

from benchmarks.embedded_soak import Clicker, EmbeddedStack, Tally, click_for

LOAD_SECONDS = float(os.environ.get("ACCELPLANE_EMBEDDED_LOAD_SECONDS", "100"))


def _spare_port() -> int:
    """A port nothing listens on now: two runs of the suite on one machine (a CI run beside a
    developer's) each click through their own stack, not one another's."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


PORT = int(os.environ.get("ACCELPLANE_EMBEDDED_TEST_PORT") or _spare_port())

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")), reason="the embedded stack runs on SQLite alone"
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = EmbeddedStack(tmp_path_factory.mktemp("embedded"), PORT)
    running.prepare()
    running.start()
    yield running
    running.stop()


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"{what} within {timeout:.0f} s")


def test_keys_are_generated_once_into_var_readable_by_the_owner_only(stack):
    for name in ("secret-key", "encryption-key"):
        path = stack.workdir / "var" / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
    # migrate, demo and collectstatic ran first: every process since read the same key.
    assert len(stack.secret("secret-key")) >= 50


def test_every_process_stays_up_and_answers_under_minutes_of_clicking(stack):
    started = stack.children()
    assert set(started) == {"web", "worker", "watcher", "beat"}
    tally = Tally()

    click_for(stack, LOAD_SECONDS, tally)

    assert tally.requests > 100
    assert not tally.errors, dict(tally.errors)
    assert stack.restarts() == []
    assert stack.children() == started
    assert stack.answers()


def test_a_killed_worker_is_started_again_and_does_its_work(stack):
    clicker = Clicker(stack, Tally())
    clicker.log_in()
    killed = stack.children()["worker"]

    os.kill(killed, signal.SIGKILL)
    # The web keeps answering while the worker is down and started again.
    deadline = time.monotonic() + 30
    while stack.children().get("worker") in (None, killed):
        assert stack.answers(), "the web server stopped answering"
        assert time.monotonic() < deadline, "the worker was not started again within 30 s"
        time.sleep(0.2)
    assert any("worker-0 exited with -9" in line for line in stack.restarts())

    # The new worker provisions a node pool (the sim provider's operation is the worker's job).
    cluster = clicker.browser.get(stack.base + "/api/v1/clusters", timeout=15).json()
    csrf = {"X-CSRFToken": clicker.browser.cookies["csrftoken"]}
    pools = f"/api/v1/clusters/{cluster['results'][0]['id']}/nodepools"
    body = {"name": "after-restart", "machine_type": "e2-standard-4", "node_count": 1}
    created = clicker.browser.post(stack.base + pools, json=body, headers=csrf, timeout=15)
    assert created.status_code == 201, created.text

    def provisioned():
        listed = clicker.browser.get(stack.base + pools, timeout=10).json()
        return [p for p in listed if p["name"] == "after-restart" and p["status"] == "RUNNING"]

    wait_for(provisioned, 60, "the restarted worker did not provision the node pool")


def test_a_killed_web_server_comes_back_and_sessions_survive_it(stack):
    clicker = Clicker(stack, Tally())
    clicker.log_in()
    killed = stack.children()["web"]

    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: stack.children().get("web") not in (None, killed), 30, "no new web")
    wait_for(stack.answers, 30, "the new web server did not answer")
    # The key was read from var/, not made up again: the session cookie still signs in.
    page = clicker.browser.get(stack.base + "/queues/", timeout=10, allow_redirects=False)
    assert page.status_code == 200


def test_sigterm_stops_every_process(stack):
    pids = list(stack.children().values())

    assert stack.stop() == 0

    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}")
