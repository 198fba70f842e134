"""`make run`: the web server, a Celery worker and Celery beat, stopped together on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

HOST = os.environ.get("ACCELPLANE_HOST", "127.0.0.1")
PORT = os.environ.get("ACCELPLANE_PORT", "8000")


def main() -> int:
    python = sys.executable
    commands = {
        "web": [python, "-m", "daphne", "-b", HOST, "-p", PORT, "controlplane.asgi:application"],
        "worker": [
            python,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "worker",
            "--pool=solo",
            "--loglevel=WARNING",
            "--without-gossip",
            "--without-mingle",
        ],
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
    processes = {name: subprocess.Popen(cmd) for name, cmd in commands.items()}
    print(f"Accelplane is serving http://{HOST}:{PORT}/ (Ctrl-C stops web, worker and beat)")  # noqa: T201
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
