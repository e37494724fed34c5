"""One command in bubblewrap: the argv, and a run under the caps on time, memory, processes and output.

The layers of one call, outside in:

    /bin/sh (host, only with a cgroup)   joins the call's cgroups, then execs bwrap
    bwrap --args FD                      namespaces: user, pid, mount, net, ipc, uts, cgroup; no caps
    prlimit --as --nproc --core          inside the user namespace, so RLIMIT_NPROC counts only the
                                         sandbox's processes, as its (non-root) uid
    nice --adjustment=10                 below Bridge's own priority
    /bin/sh -c COMMAND | python3 -I -c CODE

The options go through a pipe (`--args`), so the sandbox, which sees bwrap as its pid 1, does not read
the host's paths in /proc/1/cmdline. At the deadline the process group of bwrap is killed: the pid
namespace's init dies with it, and the kernel kills everything else in the namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bridge.config.tools import ExecSettings
from bridge.tools.builtin.exec.cgroup import CallCgroup
from bridge.tools.builtin.exec.output import Captured, capture
from bridge.tools.builtin.exec.places import (
    ETC_NETWORK,
    ETC_SHARED,
    SANDBOX_UID,
    SANDBOX_WORKSPACE,
    SYSTEM_DIRS,
    etc_files,
    proc_covers,
    strip_setid,
)

PRLIMIT = "/usr/bin/prlimit"
NICE = "/usr/bin/nice"
NICENESS = 10
# The environment inside: nothing of Bridge's (no BRIDGE_*, no tokens, no proxy settings).
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": SANDBOX_WORKSPACE,
    "LANG": "C.UTF-8",
    "TMPDIR": "/tmp",
    "USER": "sandbox",
    "LOGNAME": "sandbox",
    "SHELL": "/bin/sh",
}
# bwrap's own processes: outside, bwrap; inside, its pid 1 (the reaper). The caps leave room for them.
BWRAP_OUTSIDE = 1
BWRAP_INSIDE = 1
# How long, after a kill, the pipes and bwrap get to end before they are given up on.
GRACE_S = 5.0
# /dev/shm is memory too; a program that needs more than this should use /tmp.
SHM_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class Setup:
    """What the probe found: the bwrap to run, and how processes are capped."""

    bwrap: str
    disable_userns: bool
    # A cgroup per call (pids, and memory where available); else RLIMIT_NPROC alone.
    cgroup: bool


@dataclass(frozen=True, slots=True)
class Caps:
    timeout_s: float
    memory_bytes: int
    processes: int
    output_chars: int
    network: bool

    @classmethod
    def of(cls, settings: ExecSettings, timeout_s: float | None = None) -> Caps:
        """The caps of a call: `timeout_s` when given, at most max_timeout_s (and at least 1 s)."""
        limit = (
            settings.max_timeout_s if timeout_s is None else min(max(timeout_s, 1.0), settings.max_timeout_s)
        )
        return cls(
            timeout_s=limit,
            memory_bytes=settings.max_memory_mb << 20,
            processes=settings.max_processes,
            output_chars=settings.max_output_chars,
            network=settings.allow_network,
        )


@dataclass(slots=True)
class Outcome:
    """How a run ended. exit_code is None when it was killed (timed_out, flooded) or never started
    (failure says why, in bwrap's words)."""

    stdout: Captured
    stderr: Captured
    exit_code: int | None = None
    timed_out: bool = False
    flooded: bool = False
    failure: str | None = None
    limits_hit: list[str] = field(default_factory=list)


# --- the argv ----------------------------------------------------------------------------------


def bwrap_options(
    setup: Setup,
    caps: Caps,
    workspace: Path | None,
    hidden: Sequence[Path],
    status_fd: int,
    etc_fds: dict[str, int],
) -> list[str]:
    """bwrap's options (not the command). `workspace` None mounts an empty one (the probe)."""
    options = ["--unshare-all", "--unshare-user"]
    if caps.network:
        options.append("--share-net")
    if setup.disable_userns:
        # No user namespace inside: a nested one would give back capabilities over it.
        options.append("--disable-userns")
    options += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
    options += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--json-status-fd", str(status_fd)]
    for name in SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            options += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            options += ["--ro-bind", name, name]
    options += ["--perms", "0755", "--dir", "/etc"]
    for name in (*ETC_SHARED, *(ETC_NETWORK if caps.network else ())):
        options += ["--ro-bind-try", name, name]
    for name, fd in etc_fds.items():
        options += ["--perms", "0644", "--ro-bind-data", str(fd), name]
    options += ["--proc", "/proc"]
    for name in proc_covers():
        options += ["--ro-bind-try", name, name]
    options += ["--dev", "/dev", "--remount-ro", "/dev"]
    options += ["--size", str(min(SHM_BYTES, caps.memory_bytes // 4)), "--tmpfs", "/dev/shm"]
    # tmpfs is memory: /tmp holds at most half the cap, so it cannot be the way around max_memory_mb
    # (where a memory cgroup is used, what /tmp holds counts against the cap too).
    options += ["--size", str(caps.memory_bytes // 2), "--tmpfs", "/tmp"]
    if workspace is None:
        options += ["--size", str(1 << 20), "--tmpfs", SANDBOX_WORKSPACE]
    else:
        options += ["--bind", str(workspace), SANDBOX_WORKSPACE]
    for place in hidden:
        if place.is_dir():
            options += ["--tmpfs", str(place), "--remount-ro", str(place)]
        elif place.exists():
            options += ["--ro-bind", "/dev/null", str(place)]
    # The root tmpfs (where /etc and the links were made) read-only; /tmp and /workspace stay writable.
    options += ["--remount-ro", "/", "--chdir", SANDBOX_WORKSPACE]
    return options


def inner_command(caps: Caps, argv: Sequence[str]) -> list[str]:
    """`argv` under the rlimits, set inside the user namespace (see the module's docstring)."""
    return [
        PRLIMIT,
        f"--as={caps.memory_bytes}",
        f"--nproc={caps.processes + BWRAP_INSIDE}",
        "--core=0",
        "--",
        # Below Bridge's priority: a busy sandbox (a fork bomb spinning against its cap) leaves the
        # host's event loop its CPU.
        NICE,
        f"--adjustment={NICENESS}",
        *argv,
    ]


# The host-side join: sh writes its own pid to each cgroup.procs given before `--`, then becomes bwrap,
# so bwrap and every process under it start inside the cgroups. No preexec_fn: it is unsafe in a
# process with threads.
_JOIN = 'for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; shift; done; shift; exec "$@"'


@dataclass(frozen=True, slots=True)
class Launch:
    argv: list[str]
    pass_fds: tuple[int, ...]
    status_fd: int


def _filled_pipe(data: bytes) -> int:
    """The read end of a pipe that holds `data` and then ends. Small data only (a pipe holds 64 KiB)."""
    read, write = os.pipe()
    try:
        os.write(write, data)
    finally:
        os.close(write)
    return read


@contextlib.contextmanager
def launch(
    setup: Setup,
    caps: Caps,
    argv: Sequence[str],
    workspace: Path | None,
    hidden: Sequence[Path],
    cgroup: CallCgroup | None,
) -> Iterator[Launch]:
    fds: list[int] = []
    try:
        status_read, status_write = os.pipe()
        fds += [status_read, status_write]
        os.set_blocking(status_read, False)
        etc_fds = {}
        for name, text in etc_files().items():
            etc_fds[name] = _filled_pipe(text.encode())
            fds.append(etc_fds[name])
        options = bwrap_options(setup, caps, workspace, hidden, status_write, etc_fds)
        args_fd = _filled_pipe(b"".join(option.encode() + b"\0" for option in options))
        fds.append(args_fd)
        command = [setup.bwrap, "--args", str(args_fd), "--", *inner_command(caps, argv)]
        if cgroup is not None:
            command = ["/bin/sh", "-c", _JOIN, "bridge-exec", *cgroup.procs_files(), "--", *command]
        yield Launch(command, (status_write, args_fd, *etc_fds.values()), status_read)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def exit_code_of(status_fd: int) -> int | None:
    """The command's exit code as bwrap reported it; None when bwrap never ran it."""
    data = b""
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(status_fd, 4096):
            data += chunk
    found = re.search(rb'"exit-code"\s*:\s*(-?\d+)', data)
    return int(found.group(1)) if found else None


def failure_of(stderr: str, returncode: int | None) -> str:
    """What bwrap said when it could not run the command."""
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    if said:
        return "; ".join(said[-3:])
    return f"bubblewrap ended with code {returncode} before the command ran"


# --- a run -------------------------------------------------------------------------------------


async def run_sandboxed(
    setup: Setup, caps: Caps, argv: Sequence[str], workspace: Path, hidden: Sequence[Path] = ()
) -> Outcome:
    """Run `argv` in the sandbox with `workspace` at /workspace, under `caps`. Never raises for what the
    command does; what kept it from running is `failure`."""
    outcome = Outcome(Captured(caps.output_chars), Captured(caps.output_chars))
    cgroup = None
    if setup.cgroup:
        cgroup = CallCgroup.create(caps.processes + BWRAP_OUTSIDE + BWRAP_INSIDE, caps.memory_bytes)
        if cgroup is None:
            outcome.failure = (
                "no pids cgroup could be made for this call, so its processes could not be capped"
            )
            return outcome
    try:
        with launch(setup, caps, argv, workspace, hidden, cgroup) as launched:
            await _supervise(launched, caps, cgroup, outcome)
    finally:
        if cgroup is not None:
            outcome.limits_hit = cgroup.limits_hit()
            await _removed(cgroup)
        # Nothing of the sandbox runs any more: no file can change between the walk and the chmod.
        await asyncio.to_thread(strip_setid, workspace)
    return outcome


async def _supervise(launch: Launch, caps: Caps, cgroup: CallCgroup | None, outcome: Outcome) -> None:
    try:
        proc = await asyncio.create_subprocess_exec(
            *launch.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
            pass_fds=launch.pass_fds,
            # Its own process group, killed as one at the deadline.
            start_new_session=True,
        )
    except OSError as exc:
        # bwrap removed since the probe, or no process can be started at all.
        outcome.failure = f"{launch.argv[0]} could not be started: {exc.strerror or exc}"
        return

    def stop() -> None:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill()

    def flood() -> None:
        outcome.flooded = True
        stop()

    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        asyncio.create_task(capture(proc.stdout, outcome.stdout, flood), name="exec-stdout"),
        asyncio.create_task(capture(proc.stderr, outcome.stderr, flood), name="exec-stderr"),
    ]
    try:
        async with asyncio.timeout(caps.timeout_s):
            await proc.wait()
            # The pipes end once every process that holds them is gone: with bwrap gone, its pid
            # namespace is torn down, so this is prompt.
            await asyncio.wait(readers)
    except TimeoutError:
        outcome.timed_out = not outcome.flooded
    finally:
        # Always, also when the caller is cancelled: nothing the command started outlives the call.
        stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), GRACE_S)
        done, late = await asyncio.wait(readers, timeout=GRACE_S)
        for task in late:
            task.cancel()
        for task in done:
            # A pipe that failed mid-read only shortens the output; retrieved, so it is not logged as lost.
            if not task.cancelled():
                task.exception()
    if outcome.timed_out or outcome.flooded:
        return
    outcome.exit_code = exit_code_of(launch.status_fd)
    if outcome.exit_code is None:
        outcome.failure = failure_of(outcome.stderr.text, proc.returncode)


async def _removed(cgroup: CallCgroup) -> None:
    """Remove the call's cgroups once their processes are gone (they die within milliseconds of the
    kill); one that will not empty is left for the sweep of a later start."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GRACE_S
    while not cgroup.remove() and loop.time() < deadline:
        cgroup.kill()
        await asyncio.sleep(0.005)
