"""benchmarks/processes.py reads CPU time and processes by name from /proc (api_load's CPU per
submission): this process's CPU time grows as it works, and it is found by its name."""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchmarks import processes
from controlplane import run


def test_cpu_time_grows_with_work_and_is_zero_once_a_process_is_gone():
    before = processes.cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    assert processes.cpu_seconds(os.getpid()) - before >= 0.1
    assert processes.cpu_seconds(2**22 + 1) == 0.0  # above Linux's largest pid


def test_processes_are_found_by_their_command_name():
    name = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert os.getpid() in processes.by_command_name(name)
    assert processes.by_command_name("no-such-command") == []


def test_each_web_server_is_named_by_its_role_in_the_stack():
    """api_load counts the CPU of make stack's HTTP servers apart from its sockets servers."""
    base = int(run.PORT)
    stack = run.commands(2, 0, "uvicorn", sockets=2)
    names = {processes.role(command, base) for command in stack.values()}
    assert {"web-0", "web-1", "sockets-0", "sockets-1"} <= names
    # make run's one ASGI server serves everything: it is the web server.
    assert processes.role(run.web_command("uvicorn", str(base)), base) == "web-0"
