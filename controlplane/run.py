"""`make run`: the web server, a Celery worker, the watcher and Celery beat, stopped together
on Ctrl-C or SIGTERM. A process that exits on its own is logged and started again (see Child).

`--stack` (`make stack`) starts the full stack's processes instead, on the PostgreSQL and
Redis that DATABASE_URL and REDIS_URL name: two workers beside the watcher and beat, and the web
servers in two kinds. Two HTTP servers (PORT and PORT+1) serve the pages and the REST API:
granian, running the WSGI application (controlplane/wsgi.py). Two sockets servers (PORT+2 and
PORT+3) hold the pages' WebSockets: the ASGI application, which the pages are told to connect to
(ACCELPLANE_SOCKET_PORTS). Django's ASGI path hands every request from the event loop to a
thread and back: a fifth of the web processes' CPU a submission (README, "The full stack").
The watcher is a thread-pool worker of the `watch` queue: the long watch sessions of real
clusters' apiservers.

ACCELPLANE_WEB_SERVER picks the ASGI server: uvicorn (the default) or daphne. `make run`'s one
web server serves HTTP and the WebSockets with it; uvicorn sent events to 200 WebSockets with
half of daphne's p99 and served more submissions a second with the same CPU.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

HOST = os.environ.get("ACCELPLANE_HOST", "127.0.0.1")
PORT = os.environ.get("ACCELPLANE_PORT", "8000")
VAR_DIR = os.environ.get("ACCELPLANE_VAR_DIR", "var")
# A child that exits is started again after 1, 2, 4... (at most MAX_BACKOFF_SECONDS) seconds;
# one that exits again within STABLE_SECONDS of each start more than MAX_QUICK_CRASHES times in
# a row is crash-looping (a bad setting, a taken port): everything stops, as before.
STABLE_SECONDS = 60
MAX_QUICK_CRASHES = 5
MAX_BACKOFF_SECONDS = 30
WEB_SERVER_VARIABLE = "ACCELPLANE_WEB_SERVER"
WEB_SERVERS = ("daphne", "uvicorn")
DEFAULT_WEB_SERVER = "uvicorn"
ASGI_APPLICATION = "controlplane.asgi:application"
HTTP_PROTOCOL = "controlplane.http:BoundedHttpToolsProtocol"  # uvicorn's --http
HTTP_SERVER = "granian"  # make stack's, serving WSGI_APPLICATION
WSGI_APPLICATION = "controlplane.wsgi:application"
# An HTTP server's requests at once without a connection pool (DATABASE_POOL_SIZE=0: each
# thread keeps a connection); with one, as many as the pool holds (`http_threads`).
HTTP_THREADS = 8
# A request's line and headers at most, as uvicorn's parser (controlplane/http.py) and daphne's
# bound them: past it, granian answers 431 and closes.
HTTP_HEAD_BYTES = 16 * 1024
SOCKET_PORTS_VARIABLE = "ACCELPLANE_SOCKET_PORTS"

log = logging.getLogger("controlplane.run")


def web_server() -> str:
    """The web server ACCELPLANE_WEB_SERVER names; ValueError, naming the choices, if none."""
    server = os.environ.get(WEB_SERVER_VARIABLE) or DEFAULT_WEB_SERVER  # set but empty: unset
    if server not in WEB_SERVERS:
        raise ValueError(
            f"{WEB_SERVER_VARIABLE}={server!r} is not a web server: use one of "
            f"{', '.join(WEB_SERVERS)}"
        )
    return server


def web_command(server: str, port: str) -> list[str]:
    python = sys.executable
    if server == "daphne":
        return [python, "-m", "daphne", "-b", HOST, "-p", port, ASGI_APPLICATION]
    # As daphne is started above: X-Forwarded-* not trusted (uvicorn trusts them from
    # 127.0.0.1 by default), no lifespan events (Channels' router refuses them), idle
    # keep-alive connections closed after 60 s (Twisted's timeout; uvicorn's is 5 s). The
    # access log stays on, on stdout, as daphne's. HTTP parsed by httptools, cut off past
    # 16 KiB of an incomplete request line and headers (controlplane/http.py). [standard]
    # gives uvloop and the websockets library, which uvicorn picks by itself.
    return [
        *(python, "-m", "uvicorn", "--host", HOST, "--port", port, "--http", HTTP_PROTOCOL),
        *("--no-proxy-headers", "--lifespan", "off", "--timeout-keep-alive", "60"),
        ASGI_APPLICATION,
    ]


def http_threads() -> int:
    """As many requests at once as the process's pool of database connections holds
    (settings.DATABASE_POOL_SIZE, HTTP_THREADS by default): a thread more would wait up to the
    pool's timeout for a connection and answer 503."""
    pool = os.environ.get("DATABASE_POOL_SIZE", "")
    # Not a number: the settings stop every process at start, naming it.
    return int(pool) if pool.isdigit() and int(pool) > 0 else HTTP_THREADS


def http_command(port: str) -> list[str]:
    """The full stack's HTTP server: granian's WSGI interface, HTTP/1.1 only, with an access
    log as the ASGI servers keep."""
    return [
        *(sys.executable, "-m", HTTP_SERVER, "--interface", "wsgi", "--host", HOST, "--port", port),
        *("--http", "1", "--no-ws", "--blocking-threads", str(http_threads())),
        *("--http1-buffer-size", str(HTTP_HEAD_BYTES), "--access-log"),
        WSGI_APPLICATION,
    ]


def commands(
    webs: int, workers: int, server: str = DEFAULT_WEB_SERVER, sockets: int = 0
) -> dict[str, list[str]]:
    """The processes to start, by name: `webs` web servers from PORT on, then `workers`
    workers, the watcher and beat. With `sockets`, the web servers serve HTTP alone and as many
    ASGI servers follow them on the next ports for the WebSockets; without, the web servers are
    ASGI servers serving both."""
    python = sys.executable
    celery_worker = [
        python,
        "-m",
        "celery",
        "-A",
        "controlplane",
        "worker",
        "--loglevel=WARNING",
        "--without-gossip",
        "--without-mingle",
    ]
    worker = [*celery_worker, "--pool=solo"]
    # Sessions block on sockets, not the CPU: threads, as many as clusters x resources
    # (workloads.tasks.size_the_watcher; ACCELPLANE_MAX_WATCHED_CLUSTERS bounds the clusters).
    watcher = [*celery_worker, "--queues=watch", "--pool=threads"]
    ports = [str(int(PORT) + i) for i in range(webs + sockets)]
    web_ports, socket_ports = ports[:webs], ports[webs:]
    return {
        **{
            f"web-{port}": http_command(port) if sockets else web_command(server, port)
            for port in web_ports
        },
        **{f"sockets-{port}": web_command(server, port) for port in socket_ports},
        **{f"worker-{i}": [*worker, "--hostname", f"worker{i}@%h"] for i in range(workers)},
        "watcher": [*watcher, "--hostname", "watcher@%h"],
        "beat": [
            python,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "beat",
            "--loglevel=WARNING",
            "--schedule",
            os.path.join(VAR_DIR, "celerybeat-schedule"),
        ],
    }


def stack_environment() -> bool:
    """Check and complete the full stack's environment; False when it cannot run."""
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        print("--stack needs DATABASE_URL and REDIS_URL", file=sys.stderr)  # noqa: T201
        return False
    # Workers are there to admit: requests only store and queue (settings.py).
    os.environ.setdefault("ACCELPLANE_ADMISSION", "worker")
    return True


class Child:
    """One supervised process: restarted when it exits, after a back-off that grows while it
    keeps crashing soon after starting."""

    def __init__(self, name: str, command: list[str]) -> None:
        self.name = name
        self.command = command
        self.process = subprocess.Popen(command)
        self.started = time.monotonic()
        self.quick_crashes = 0
        self.restart_at: float | None = None

    def check(self, now: float) -> bool:
        """Restart the process if it is due; False when it keeps crashing: give up."""
        if self.restart_at is not None:
            if now >= self.restart_at:
                self.restart_at = None
                self.process = subprocess.Popen(self.command)
                self.started = now
                log.warning("%s started again (pid %d)", self.name, self.process.pid)
            return True
        code = self.process.poll()
        if code is None:
            return True
        ran = now - self.started
        self.quick_crashes = self.quick_crashes + 1 if ran < STABLE_SECONDS else 1
        if self.quick_crashes > MAX_QUICK_CRASHES:
            log.error(
                "%s exited with %s %d times in a row; giving up",
                self.name,
                code,
                self.quick_crashes,
            )
            return False
        delay = min(2 ** (self.quick_crashes - 1), MAX_BACKOFF_SECONDS)
        log.warning(
            "%s exited with %s after %.0f s; restarting it in %d s", self.name, code, ran, delay
        )
        self.restart_at = now + delay
        return True

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)


def supervise(children: list[Child]) -> int:
    while all(child.check(time.monotonic()) for child in children):
        time.sleep(0.5)
    return 1


def main() -> int:
    stack = "--stack" in sys.argv[1:]
    if stack and not stack_environment():
        return 2
    try:
        server = web_server()
    except ValueError as error:
        print(error, file=sys.stderr)  # noqa: T201
        return 2
    logging.basicConfig(format="%(asctime)s %(levelname)s run: %(message)s", level=logging.INFO)
    # A SIGTERM (docker stop, a supervisor) stops the children too, via the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    launched = commands(2, 2, server, sockets=2) if stack else commands(1, 1, server)
    socket_ports = [
        name.removeprefix("sockets-") for name in launched if name.startswith("sockets-")
    ]
    if socket_ports:  # the pages' WebSockets go there, unless told otherwise (a proxy's)
        os.environ.setdefault(SOCKET_PORTS_VARIABLE, ",".join(socket_ports))
    children = [Child(name, cmd) for name, cmd in launched.items()]
    webs = ", ".join(
        f"http://{HOST}:{n.removeprefix('web-')}/" for n in launched if n.startswith("web-")
    )
    sockets = f", WebSockets on ports {', '.join(socket_ports)}" if socket_ports else ""
    print(f"Accelplane is serving {webs}{sockets} (Ctrl-C stops every process)")  # noqa: T201
    try:
        return supervise(children)
    except KeyboardInterrupt:
        return 0
    finally:
        for child in children:
            child.stop()
        for child in children:
            try:
                child.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.process.kill()


if __name__ == "__main__":
    sys.exit(main())
