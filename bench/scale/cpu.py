"""CPU time of processes, read from /proc: the workers', and the PostgreSQL server's with its backends.

Read at the start and the end of a measuring window, so a figure is the CPU the window cost, not the
start-up's. Where /proc cannot be read (not Linux), every reading is None and the figures say "n/a".
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after its closing one.
    return raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(pid: int, *, children: bool = False) -> float | None:
    """User and system time of `pid` (threads included); with `children`, also of its children that
    ended and were waited for (a server's backends that closed)."""
    fields = _fields(pid)
    if fields is None:
        return None
    # Fields 14-17 of stat (utime, stime, cutime, cstime), here from the 3rd on: index 11-14.
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICK


def tree_seconds(parent: int) -> float | None:
    """CPU of a server process and all its children, living or ended (PostgreSQL's postmaster)."""
    total = cpu_seconds(parent, children=True)
    if total is None:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _fields(int(entry.name))
        if fields is not None and int(fields[1]) == parent:
            total += cpu_seconds(int(entry.name)) or 0.0
    return total


def postmaster_pid(data_dir: Path) -> int | None:
    """The server's pid, from the first line of postmaster.pid in its data folder."""
    try:
        return int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
