"""`make run` and `make stack` start their web servers with uvicorn or daphne, as
ACCELPLANE_WEB_SERVER says, and Compose as `make stack` does; any other value stops the
launcher before it starts anything (controlplane/run.py, issue 15)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from daphne.cli import CommandLineInterface
from uvicorn.main import main as uvicorn_main

from controlplane import run

APP = "controlplane.asgi:application"
ROOT = Path(__file__).resolve().parents[2]


def webs(commands: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: command for name, command in commands.items() if name.startswith("web-")}


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


def test_compose_starts_the_default_web_server_as_make_stack_does() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = compose["services"]["web"]["command"].split()

    expected = run.web_command(run.DEFAULT_WEB_SERVER, "8000")
    expected[expected.index(run.HOST)] = "0.0.0.0"  # noqa: S104 - the container's interfaces
    assert command == ["python", *expected[1:]]
