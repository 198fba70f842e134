"""`make run` starts its web server with uvicorn or daphne, as ACCELPLANE_WEB_SERVER says;
`make stack` serves HTTP with granian (WSGI) and its WebSockets with that ASGI server, on ports
of their own that the pages are told, and Compose does as `make stack` does; any other value
stops the launcher before it starts anything (controlplane/run.py, issue 15)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml
from daphne.cli import CommandLineInterface
from granian.cli import cli as granian_cli
from uvicorn.main import main as uvicorn_main

from controlplane import run

APP = "controlplane.asgi:application"
ROOT = Path(__file__).resolve().parents[2]


def webs(commands: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: command for name, command in commands.items() if name.startswith("web-")}


def port(offset: int) -> str:
    return str(int(run.PORT) + offset)


def test_uvicorn_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELPLANE_WEB_SERVER", raising=False)
    assert run.web_server() == "uvicorn"
    monkeypatch.setenv("ACCELPLANE_WEB_SERVER", "")  # set but empty: as unset
    assert run.web_server() == "uvicorn"


@pytest.mark.parametrize("server", ["daphne", "uvicorn"])
def test_the_variable_picks_the_server(monkeypatch: pytest.MonkeyPatch, server: str) -> None:
    monkeypatch.setenv("ACCELPLANE_WEB_SERVER", server)
    assert run.web_server() == server


def test_daphne_serves_the_app_on_each_port() -> None:
    second = str(int(run.PORT) + 1)

    assert webs(run.commands(2, 2, "daphne")) == {
        f"web-{port}": [sys.executable, "-m", "daphne", "-b", run.HOST, "-p", port, APP]
        for port in (run.PORT, second)
    }
    assert run.commands(1, 1) == run.commands(1, 1, "uvicorn")


def test_uvicorn_serves_the_same_app_as_daphne_does() -> None:
    second = str(int(run.PORT) + 1)

    assert webs(run.commands(2, 2, "uvicorn")) == {
        f"web-{port}": [
            *(sys.executable, "-m", "uvicorn", "--host", run.HOST, "--port", port),
            # httptools, with a bound on a request's head (tests/security/test_web_servers.py).
            *("--http", "controlplane.http:BoundedHttpToolsProtocol"),
            # daphne trusts no X-Forwarded-* here, sends no lifespan, keeps idle
            # connections 60 s; uvicorn's access log is on by default, as daphne's.
            *("--no-proxy-headers", "--lifespan", "off", "--timeout-keep-alive", "60"),
            APP,
        ]
        for port in (run.PORT, second)
    }
    # Only the web servers change.
    daphne, uvicorn = run.commands(2, 2, "daphne"), run.commands(2, 2, "uvicorn")
    assert {n: c for n, c in daphne.items() if n not in webs(daphne)} == {
        n: c for n, c in uvicorn.items() if n not in webs(uvicorn)
    }


def test_the_stack_serves_http_with_granian_and_the_sockets_with_the_asgi_server() -> None:
    stack = run.commands(2, 2, "daphne", sockets=2)

    assert webs(stack) == {f"web-{port(i)}": run.http_command(port(i)) for i in (0, 1)}
    assert {name: command for name, command in stack.items() if "sockets" in name} == {
        f"sockets-{port(i)}": run.web_command("daphne", port(i)) for i in (2, 3)
    }
    # The workers, the watcher and beat are those of make run, twice the workers.
    plain = run.commands(2, 2, "daphne")
    assert {n: c for n, c in stack.items() if n not in webs(stack) and "sockets" not in n} == {
        n: c for n, c in plain.items() if n not in webs(plain)
    }


def test_each_command_line_is_one_its_server_accepts() -> None:
    """The installed servers parse the options (nothing is started)."""
    (daphne,) = webs(run.commands(1, 1, "daphne")).values()
    (uvicorn,) = webs(run.commands(1, 1, "uvicorn")).values()

    daphne_args = CommandLineInterface().parser.parse_args(daphne[3:])
    assert (daphne_args.application, daphne_args.proxy_headers) == (APP, False)
    uvicorn_args = uvicorn_main.make_context("uvicorn", uvicorn[3:]).params
    assert uvicorn_args["app"] == APP
    assert (uvicorn_args["proxy_headers"], uvicorn_args["access_log"]) == (False, True)
    assert (uvicorn_args["lifespan"], uvicorn_args["timeout_keep_alive"]) == ("off", 60)
    assert uvicorn_args["http"] == "controlplane.http:BoundedHttpToolsProtocol"
    granian = granian_cli.make_context("granian", run.http_command(run.PORT)[3:]).params
    assert (granian["app"], granian["interface"]) == ("controlplane.wsgi:application", "wsgi")
    assert (granian["http"], granian["websockets"]) == ("1", False)  # HTTP/1.1 and nothing else
    # As many requests at once as a process has database connections; a request's head bounded.
    assert (granian["blocking_threads"], granian["http1_buffer_size"]) == (8, 16 * 1024)
    assert granian["log_access_enabled"] is True


@pytest.mark.parametrize(("pool", "threads"), [("4", 4), ("16", 16), ("0", 8), ("", 8)])
def test_the_http_servers_threads_follow_the_connection_pool(monkeypatch, pool, threads):
    monkeypatch.setenv("DATABASE_POOL_SIZE", pool)
    granian = granian_cli.make_context("granian", run.http_command(run.PORT)[3:]).params
    assert granian["blocking_threads"] == threads


class Launched:
    """A child process that was never started: run.main's view of it while supervise runs."""

    def __init__(self, command: list[str]) -> None:
        self.command = command

    def poll(self) -> None:
        return None

    def send_signal(self, signal: int) -> None:
        pass

    def wait(self, timeout: float) -> int:
        return 0


@pytest.fixture
def launch_the_stack(monkeypatch: pytest.MonkeyPatch) -> dict:
    """run.main for `make stack`, with its processes recorded, not started."""
    seen: dict = {}
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/accelplane")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setattr(sys, "argv", ["run", "--stack"])
    monkeypatch.setattr("subprocess.Popen", Launched)

    def supervise(children: list[run.Child]) -> int:
        seen["names"] = [child.name for child in children]
        seen["socket ports"] = os.environ[run.SOCKET_PORTS_VARIABLE]
        return 0

    monkeypatch.setattr(run, "supervise", supervise)
    return seen


def test_the_stack_tells_the_pages_where_the_sockets_are(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], launch_the_stack: dict
) -> None:
    monkeypatch.delenv(run.SOCKET_PORTS_VARIABLE, raising=False)

    assert run.main() == 0

    names = [f"web-{port(0)}", f"web-{port(1)}", f"sockets-{port(2)}", f"sockets-{port(3)}"]
    assert launch_the_stack["names"][:4] == names
    assert launch_the_stack["socket ports"] == f"{port(2)},{port(3)}"
    assert f"WebSockets on ports {port(2)}, {port(3)}" in capsys.readouterr().out


def test_a_proxy_in_front_keeps_the_pages_sockets_on_their_own_origin(
    monkeypatch: pytest.MonkeyPatch, launch_the_stack: dict
) -> None:
    monkeypatch.setenv(run.SOCKET_PORTS_VARIABLE, "")  # set, and empty: the page's own origin

    assert run.main() == 0

    assert launch_the_stack["socket ports"] == ""


@pytest.mark.parametrize("value", ["gunicorn", "Uvicorn", "daphne "])
def test_another_value_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    monkeypatch.setenv("ACCELPLANE_WEB_SERVER", value)
    monkeypatch.setattr(sys, "argv", ["run"])

    def must_not_start(*args: object, **kwargs: object) -> None:
        raise AssertionError("a process was started")

    monkeypatch.setattr("subprocess.Popen", must_not_start)

    assert run.main() == 2
    assert capsys.readouterr().err.strip() == (
        f"ACCELPLANE_WEB_SERVER={value!r} is not a web server: use one of daphne, uvicorn"
    )


def in_a_container(command: list[str]) -> list[str]:
    """The command as Compose runs it: `python`, on every interface of the container."""
    command = ["python", *command[1:]]
    command[command.index(run.HOST)] = "0.0.0.0"  # noqa: S104 - the container's interfaces
    return command


def test_compose_starts_the_web_servers_as_make_stack_does() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]

    assert services["web"]["command"].split() == in_a_container(run.http_command("8000"))
    sockets = run.web_command(run.DEFAULT_WEB_SERVER, "8000")
    assert services["sockets"]["command"].split() == in_a_container(sockets)
    # The pages on the web servers open their sockets on the sockets' published ports.
    published = services["sockets"]["ports"][0].split(":")[0]  # 8002-8003
    first, last = (int(p) for p in published.split("-"))
    ports = services["web"]["environment"][run.SOCKET_PORTS_VARIABLE]
    assert ports == ",".join(str(p) for p in range(first, last + 1))
