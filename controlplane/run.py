"""`make run`: the web server, a Celery worker, the watcher and Celery beat, stopped together
on Ctrl-C.

`--stack` (`make stack`) starts the full stack's processes instead: two web servers (PORT and
PORT+1) and two workers beside the watcher and beat, on the PostgreSQL and Redis that
DATABASE_URL and REDIS_URL name. The watcher is a thread-pool worker of the `watch` queue:
the long watch sessions of real clusters' apiservers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

HOST = os.environ.get("ACCELPLANE_HOST", "127.0.0.1")
PORT = os.environ.get("ACCELPLANE_PORT", "8000")


def commands(webs: int, workers: int) -> dict[str, list[str]]:
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
    # Sessions block on sockets, not the CPU: threads, as many as clusters x resources.
    watcher = [*celery_worker, "--queues=watch", "--pool=threads", "--concurrency=32"]
    ports = [str(int(PORT) + i) for i in range(webs)]
    return {
        **{
            f"web-{port}": [
                python,
                "-m",
                "daphne",
                "-b",
                HOST,
                "-p",
                port,
                "controlplane.asgi:application",
            ]
            for port in ports
        },
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
            os.path.join("var", "celerybeat-schedule"),
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


def main() -> int:
    stack = "--stack" in sys.argv[1:]
    if stack and not stack_environment():
        return 2
    # A SIGTERM (docker stop, a supervisor) stops the children too, via the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    processes = {
        name: subprocess.Popen(cmd)
        for name, cmd in commands(*((2, 2) if stack else (1, 1))).items()
    }
    webs = ", ".join(
        f"http://{HOST}:{n.removeprefix('web-')}/" for n in processes if n.startswith("web-")
    )
    print(f"Accelplane is serving {webs} (Ctrl-C stops every process)")  # noqa: T201
    try:
        while True:
            for name, process in processes.items():
                if process.poll() is not None:
                    print(f"{name} exited with {process.returncode}; stopping", file=sys.stderr)  # noqa: T201
                    return process.returncode or 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    sys.exit(main())
