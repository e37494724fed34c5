"""A cgroup per call: the one cap on processes that holds for root, and a cap on the call's memory.

RLIMIT_NPROC is not enforced for processes whose real uid is root, and a user namespace does not change
that (the kernel compares the host's uid, 0, with INIT_USER): measured here, 40 `sleep &` all started
under `prlimit --nproc=20` as root, while under a normal user the 19th fork failed. A pids cgroup holds
for everyone, so it is used wherever this process may make one: root, or a delegated subtree. Both
cgroup v1 (a hierarchy per controller) and v2 (one hierarchy) are read from /proc/self/mountinfo and
/proc/self/cgroup; where our cgroup cannot take a child (v2 outside a delegated subtree, for one),
`CallCgroup.create` returns None and the sandbox falls back on rlimits.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PIDS = "pids"
MEMORY = "memory"
# Our children are named after this process, so one Bridge never touches another's.
_PREFIX = "bridge-exec-"
_serial = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Where a controller's cgroup of this process is, as a folder."""

    controller: str
    folder: Path
    v2: bool


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as \040, \011, \012 and \134.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(root inside the hierarchy, mount point, fs type, super options) of each cgroup mount."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        found.append((_unescape(fields[3]), Path(_unescape(fields[4])), tail[0], set(tail[2].split(","))))
    return found


def _memberships() -> dict[str, str]:
    """Controller name (or "" for v2) → this process's cgroup path in that hierarchy."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _inside(mount_root: str, mount_point: Path, path: str) -> Path | None:
    """The folder of cgroup `path` under a mount of the hierarchy from `mount_root`; None when the
    mount does not show it (a container that sees only part of the hierarchy)."""
    root, target = Path(mount_root), Path(path)
    if not target.is_relative_to(root):
        return None
    return mount_point / target.relative_to(root)


def _hierarchy(controller: str) -> Hierarchy | None:
    mounts, member = _mounts(), _memberships()
    for root, point, fstype, options in mounts:
        if fstype == "cgroup" and controller in options and controller in member:
            folder = _inside(root, point, member[controller])
            if folder is not None and folder.is_dir():
                return Hierarchy(controller, folder, v2=False)
    for root, point, fstype, _ in mounts:
        if fstype == "cgroup2" and "" in member:
            folder = _inside(root, point, member[""])
            # A v2 child gets a controller only where our own cgroup hands it down.
            if folder is not None and controller in _words(folder / "cgroup.subtree_control"):
                return Hierarchy(controller, folder, v2=True)
    return None


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _counter(path: Path, key: str) -> int:
    """The value of `key` in a flat-keyed cgroup file (pids.events, memory.events, memory.oom_control)."""
    words = _words(path)
    for name, value in zip(words[::2], words[1::2], strict=False):
        if name == key and value.isdigit():
            return int(value)
    return 0


@dataclass(slots=True)
class CallCgroup:
    """One call's cgroups: its processes join them before bwrap runs, so every process in the
    sandbox is counted, and they are killed and removed together at the end."""

    folders: dict[str, Path]
    v2: bool

    @classmethod
    def create(cls, max_processes: int, memory_bytes: int) -> CallCgroup | None:
        """A pids cgroup capped at `max_processes` (and a memory one at `memory_bytes` where that
        controller can be had too); None where no pids cgroup can be made."""
        pids = _hierarchy(PIDS)
        if pids is None:
            return None
        name = f"{_PREFIX}{os.getpid()}-{next(_serial)}"
        folders: dict[str, Path] = {}
        try:
            folders[PIDS] = _made(pids.folder / name, {"pids.max": str(max_processes)})
        except OSError:
            return None
        memory = _hierarchy(MEMORY)
        if memory is not None:
            limits = (
                {"memory.max": str(memory_bytes), "memory.swap.max": "0"}
                if memory.v2
                else {
                    "memory.limit_in_bytes": str(memory_bytes),
                    "memory.memsw.limit_in_bytes": str(memory_bytes),
                }
            )
            with contextlib.suppress(OSError):
                folders[MEMORY] = _made(memory.folder / name, limits, required=1)
        return cls(folders, pids.v2)

    def procs_files(self) -> list[str]:
        """The cgroup.procs files a process writes its pid to, to join (one per folder)."""
        return [str(folder / "cgroup.procs") for folder in dict.fromkeys(self.folders.values())]

    def limits_hit(self) -> list[str]:
        """Which caps turned something down: "processes" (a fork refused), "memory" (an OOM kill)."""
        hit = []
        if PIDS in self.folders and _counter(self.folders[PIDS] / "pids.events", "max"):
            hit.append("processes")
        if MEMORY in self.folders:
            events = "memory.events" if self.v2 else "memory.oom_control"
            if _counter(self.folders[MEMORY] / events, "oom_kill"):
                hit.append("memory")
        return hit

    def pids(self) -> set[int]:
        found: set[int] = set()
        for folder in self.folders.values():
            found.update(int(word) for word in _words(folder / "cgroup.procs") if word.isdigit())
        return found

    def kill(self) -> None:
        """SIGKILL every process in the cgroups (cgroup.kill where the kernel has it)."""
        for folder in self.folders.values():
            kill_file = folder / "cgroup.kill"
            if self.v2 and kill_file.exists():
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self) -> bool:
        """Remove the folders; False while one is still busy (a process still exiting: cgroup.procs can
        be empty a moment before the folder may go). A caller tries again, or leaves it for the sweep."""
        removed = True
        for folder in dict.fromkeys(self.folders.values()):
            try:
                folder.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                removed = False
        return removed

    def remove_soon(self, within_s: float = 2.0) -> bool:
        """remove(), tried again for up to `within_s` (blocking: for the probe, outside a loop)."""
        deadline = time.monotonic() + within_s
        while not self.remove():
            if time.monotonic() > deadline:
                return False
            self.kill()
            time.sleep(0.005)
        return True


def _made(folder: Path, limits: dict[str, str], required: int | None = None) -> Path:
    """Make `folder` and write its limits; the first `required` of them (all by default) must take, or
    the folder is removed and OSError raised. memory.memsw / memory.swap exist only with swap
    accounting, so the memory cgroup asks only for its first."""
    folder.mkdir()
    try:
        for index, (name, value) in enumerate(limits.items()):
            try:
                (folder / name).write_text(value)
            except OSError:
                if required is None or index < required:
                    raise
        return folder
    except OSError:
        with contextlib.suppress(OSError):
            folder.rmdir()
        raise


@cache
def sweep_stale() -> None:
    """Remove the empty cgroups a Bridge that died (kill -9) left behind, once per process."""
    for controller in (PIDS, MEMORY):
        found = _hierarchy(controller)
        if found is None:
            continue
        with contextlib.suppress(OSError):
            for child in found.folder.glob(f"{_PREFIX}*"):
                owner = child.name.removeprefix(_PREFIX).split("-", 1)[0]
                if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                    with contextlib.suppress(OSError):
                        child.rmdir()
