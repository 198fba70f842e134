"""The processes of a running stack (controlplane.run's), read from /proc: Linux, no psutil.

Their children, command lines, resident memory (RSS), CPU time and names: benchmarks/api_load.py
and benchmarks/embedded_soak.py sample them. A process may exit between two reads: what is
read of it then is empty (no children, no command line, no RSS), never an error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def children(pid: int) -> list[int]:
    """pid's child processes, in pid order ([] once pid has exited)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    found: list[int] = []
    for task in tasks:  # each thread lists the children it started
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:  # the thread or the process ended since the listing
            continue
    return sorted(found)


def command_line(pid: int) -> list[str]:
    """The process's arguments ([] once it has exited, or for a zombie)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return cmdline.decode().split("\0") if cmdline else []


def rss_kib(pid: int) -> int | None:
    """The process's resident memory (VmRSS) in KiB; None once it has exited, or for a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(found[1]) if found else None


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time the process has used; 0.0 once it has exited."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # After the command name, which may hold spaces and parentheses: fields 3 onwards.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def by_command_name(name: str) -> list[int]:
    """Every running process whose command name is `name` (postgres, redis-server)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == name:
                found.append(int(entry.name))
        except OSError:  # ended since the listing
            continue
    return sorted(found)


def kind(cmdline: list[str]) -> str:
    """web, beat, watcher or worker: what controlplane.run started the process as."""
    if any(server in cmdline for server in ("granian", "daphne", "uvicorn")):  # controlplane.run
        return "web"
    if "beat" in cmdline:
        return "beat"
    return "watcher" if "--queues=watch" in cmdline else "worker"


def role(cmdline: list[str], base_port: int) -> str | None:
    """The process's name in controlplane.run's stack, from the command line it gave it: web-0
    on base_port, web-1 on the next, sockets-0 and sockets-1 on the two after (make stack's ASGI
    servers, after its two HTTP servers), worker-0, worker-1, watcher, beat; None for another."""
    for server, port_option in (("granian", "--port"), ("daphne", "-p"), ("uvicorn", "--port")):
        if server in cmdline and port_option in cmdline:
            offset = int(cmdline[cmdline.index(port_option) + 1]) - base_port
            if server == "granian" or offset < 2:  # make run's one ASGI server is its web server
                return f"web-{offset}"
            return f"sockets-{offset - 2}"
    if "beat" in cmdline:
        return "beat"
    if "--hostname" in cmdline:  # worker0@%h, watcher@%h
        node = cmdline[cmdline.index("--hostname") + 1].split("@")[0]
        return re.sub(r"(\d+)$", r"-\1", node)
    return None


def stack_processes(root: int, base_port: int) -> dict[str, int]:
    """The names and pids of root's descendants: the stack's processes by their role, and
    their own children (a Celery pool's) after them, as worker-0.child-1..."""
    named = {}
    pending = [(pid, role(command_line(pid), base_port) or f"pid-{pid}") for pid in children(root)]
    while pending:
        pid, name = pending.pop()
        named[name] = pid
        pending += [(child, f"{name}.child-{i}") for i, child in enumerate(children(pid), 1)]
    return named


def memory(named: dict[str, int]) -> dict[str, tuple[int, int]]:
    """name: (pid, RSS in KiB) of the named processes still running."""
    sample = {}
    for name, pid in named.items():
        kib = rss_kib(pid)
        if kib is not None:
            sample[name] = (pid, kib)
    return sample
