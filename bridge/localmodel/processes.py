"""What the OS says of a process (when it started, what it runs), so a reused PID is never taken for ours."""

from __future__ import annotations

import subprocess
from pathlib import Path


def process_start(pid: int) -> str | None:
    """When a process started, as the OS records it (fixed for its lifetime); None if there is none."""
    if Path("/proc/self/stat").exists():
        try:
            # Field 22, starttime; the fields are counted after the command name, which may hold spaces.
            return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
        except (OSError, IndexError):
            return None
    return _ps(pid, "lstart=")


def process_command(pid: int) -> str | None:
    """A process's command line, arguments joined by spaces; None if there is no such process."""
    if Path("/proc/self/cmdline").exists():
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return raw.replace(b"\0", b" ").decode(errors="replace").strip() or None
    return _ps(pid, "command=")


def _ps(pid: int, field: str) -> str | None:
    """One field of `ps` for a process, where there is no /proc (macOS, the BSDs)."""
    try:
        out = subprocess.run(["ps", "-o", field, "-p", str(pid)], capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() or None
