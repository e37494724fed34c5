"""The probe: whether a sandbox can be made here at all, found once and kept.

It checks what a call would need (bwrap and its options, prlimit, a cap on processes that holds) and
then makes a real sandbox twice: once to run `exit 0`, and, where RLIMIT_NPROC is the only cap on
processes, once more to see a fork refused under it. Any failure is the reason every call is refused
(`sandbox_problem`, which check-config prints).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from bridge.config.tools import ExecSettings
from bridge.tools.builtin.exec.cgroup import CallCgroup, sweep_stale
from bridge.tools.builtin.exec.output import Captured
from bridge.tools.builtin.exec.sandbox import (
    BWRAP_INSIDE,
    BWRAP_OUTSIDE,
    ENV,
    NICE,
    PRLIMIT,
    Caps,
    Outcome,
    Setup,
    exit_code_of,
    failure_of,
    launch,
)

# Options this code needs, and the bubblewrap that has them all (0.5, 2021).
REQUIRED_OPTIONS = ("--args", "--json-status-fd", "--size", "--perms", "--ro-bind-data", "--die-with-parent")
# Seconds the probe's trivial runs may take (bwrap starts in about 10 ms).
PROBE_TIMEOUT_S = 10.0
# What to check when bwrap cannot make a sandbox: nearly always user namespaces.
USERNS_HINT = (
    "unprivileged user namespaces may be off (sysctl user.max_user_namespaces, Debian's "
    "kernel.unprivileged_userns_clone, Ubuntu's kernel.apparmor_restrict_unprivileged_userns), or a "
    "container's seccomp profile may refuse them"
)


def sandbox_problem(settings: ExecSettings) -> str | None:
    """Why no command can run in a sandbox here (bwrap missing or too old, no user namespaces, no cap
    on processes that holds); None when the sandbox works. Probed once per bwrap and network setting."""
    found = setup_of(settings)
    return found if isinstance(found, str) else None


def setup_of(settings: ExecSettings) -> Setup | str:
    """The probe's Setup, or why there is none (cached: the probe runs bwrap a few times, ~50 ms)."""
    return _probe(settings.bwrap, settings.allow_network)


@cache
def _probe(bwrap: str, network: bool) -> Setup | str:
    binary = shutil.which(bwrap)
    if binary is None:
        where = "" if "/" in bwrap else " on PATH"
        return (
            f"bubblewrap is not installed: '{bwrap}' was not found{where}. Install Debian's bubblewrap "
            "(apt-get install bubblewrap) or set [tools.exec] bwrap to its path."
        )
    if not Path(PRLIMIT).is_file():
        return f"{PRLIMIT} (util-linux) is missing; it sets the sandbox's caps on memory and processes."
    if not Path(NICE).is_file():
        return f"{NICE} (coreutils) is missing; it runs the sandbox below Bridge's priority."
    try:
        shown = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{binary} cannot be run: {exc}"
    usage = shown.stdout + shown.stderr
    missing = [option for option in REQUIRED_OPTIONS if option not in usage]
    if missing:
        return f"{binary} is too old: it lacks {', '.join(missing)}; bubblewrap 0.5 or later is needed."
    sweep_stale()
    trial = CallCgroup.create(8, 64 << 20)
    if trial is not None:
        trial.remove_soon()
    if trial is None and os.geteuid() == 0:
        return (
            "Bridge runs as root, where the kernel does not enforce RLIMIT_NPROC, and no pids cgroup "
            "could be made for the sandbox, so a fork bomb would not be contained. Run Bridge as a "
            "normal user (bubblewrap then uses an unprivileged user namespace), or give it a writable "
            "pids cgroup."
        )
    setup = Setup(binary, "--disable-userns" in usage, cgroup=trial is not None)
    caps = Caps(PROBE_TIMEOUT_S, 256 << 20, 8, 1000, network)
    outcome = _run_sync(setup, caps, ["/bin/sh", "-c", "exit 0"])
    if outcome.exit_code != 0:
        said = outcome.failure or outcome.stderr.text.strip() or f"exit code {outcome.exit_code}"
        return f"bubblewrap ({binary}) could not make a sandbox: {said}. {USERNS_HINT}."
    if not setup.cgroup:
        # RLIMIT_NPROC is the only cap on processes here: prove it holds. With room for no process
        # but the shell (and bwrap's init), starting /bin/true must fail.
        held = _run_sync(
            setup,
            Caps(PROBE_TIMEOUT_S, 256 << 20, 1, 1000, network),
            ["/bin/sh", "-c", "/bin/true && echo forked"],
        )
        if "forked" in held.stdout.text:
            return (
                "the sandbox's cap on processes (RLIMIT_NPROC) does not hold here, so a fork bomb would "
                "not be contained."
            )
    return setup


def _run_sync(setup: Setup, caps: Caps, argv: Sequence[str]) -> Outcome:
    """A small run for the probe, without asyncio (check-config calls the probe outside a loop)."""
    outcome = Outcome(Captured(caps.output_chars), Captured(caps.output_chars))
    cgroup = (
        CallCgroup.create(caps.processes + BWRAP_OUTSIDE + BWRAP_INSIDE, caps.memory_bytes)
        if setup.cgroup
        else None
    )
    if setup.cgroup and cgroup is None:
        outcome.failure = "no pids cgroup could be made"
        return outcome
    try:
        with launch(setup, caps, argv, None, (), cgroup) as launched:
            try:
                done = subprocess.run(
                    launched.argv,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    env=ENV,
                    pass_fds=launched.pass_fds,
                    start_new_session=True,
                    timeout=caps.timeout_s,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                outcome.failure = str(exc)
                return outcome
            outcome.stdout.add(done.stdout.decode(errors="replace"))
            outcome.stderr.add(done.stderr.decode(errors="replace"))
            outcome.exit_code = exit_code_of(launched.status_fd)
            if outcome.exit_code is None:
                outcome.failure = failure_of(outcome.stderr.text, done.returncode)
    finally:
        if cgroup is not None:
            cgroup.kill()
            cgroup.remove_soon()
    return outcome
