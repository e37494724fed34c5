"""run_command and run_python: the model's side of the sandbox, and what it is told of a run."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from bridge.config.tools import ExecSettings
from bridge.tools.arguments import Arguments, Seconds, Text, typed_tool
from bridge.tools.base import Tool, ToolContext, ToolResult
from bridge.tools.builtin.exec.output import FLOOD_FACTOR, FLOOD_MIN_BYTES, Captured
from bridge.tools.builtin.exec.places import hidden_places, workspace_problem
from bridge.tools.builtin.exec.probe import setup_of
from bridge.tools.builtin.exec.sandbox import GRACE_S, Caps, Outcome, Setup, run_sandboxed
from bridge.tools.builtin.workspace import workspace_of
from bridge.tools.checking import SAID

# One argument of execve may be at most 128 KiB (MAX_ARG_STRLEN); code longer than this belongs in a
# workspace file, run with run_command.
MAX_SOURCE_BYTES = 100_000
# Characters of a run's output in a plain-words answer.
PLAIN_CHARS = 1500
_SIGNALS = frozenset(int(number) for number in signal.Signals)
# The sandbox's python3 is the host's, through the read-only /usr.
PYTHON = "/usr/bin/python3"


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError(SAID, "must not contain a NUL byte")
    return value


Source = Annotated[Text, AfterValidator(_no_nul)]


class RunCommandArgs(Arguments):
    command: Source = Field(description="A shell command line, run by /bin/sh -c in /workspace, e.g. ls -la")
    timeout_s: Seconds | None = Field(
        None,
        description="Seconds before it is killed with everything it started (default and most: the limit)",
    )


class RunPythonArgs(Arguments):
    code: Source = Field(description="Python 3 source; print() what you want to see")


def _too_long(text: str, what: str) -> ToolResult | None:
    size = len(text.encode())
    if size <= MAX_SOURCE_BYTES:
        return None
    return ToolResult.error(
        "too_long",
        f"The {what} is {size} bytes; at most {MAX_SOURCE_BYTES} can be passed. Write it to a file in the "
        "workspace and run that file with run_command.",
    )


def _stream(data: dict[str, Any], name: str, captured: Captured) -> None:
    data[name] = captured.text
    if captured.cut_chars:
        data[f"{name}_cut_chars"] = captured.cut_chars


def _report(outcome: Outcome, caps: Caps) -> dict[str, Any]:
    """The run as the model reads it."""
    data: dict[str, Any] = {}
    if outcome.timed_out:
        data["timed_out"] = True
        data["timeout_s"] = caps.timeout_s
    elif outcome.exit_code is not None:
        data["exit_code"] = outcome.exit_code
        # bwrap reports a death by signal as 128 + its number, as a shell does.
        if outcome.exit_code - 128 in _SIGNALS:
            data["signal"] = signal.Signals(outcome.exit_code - 128).name
    _stream(data, "stdout", outcome.stdout)
    _stream(data, "stderr", outcome.stderr)
    if outcome.limits_hit:
        data["limits_hit"] = outcome.limits_hit
    return data


def _result(outcome: Outcome, caps: Caps) -> ToolResult:
    if outcome.exit_code is None and "memory" in outcome.limits_hit:
        # The memory cgroup's OOM kill took bwrap itself (what /tmp holds cannot be reclaimed).
        return ToolResult.error(
            "memory_limit",
            f"The command went past its memory cap of {caps.memory_bytes >> 20} MB (files in /tmp count "
            f"too) and was killed. Output so far: {json.dumps(_report(outcome, caps), ensure_ascii=False)}",
        )
    if outcome.failure is not None:
        return ToolResult.error("sandbox_failed", f"The sandbox could not run the command: {outcome.failure}")
    report = json.dumps(_report(outcome, caps), ensure_ascii=False)
    if outcome.timed_out:
        return ToolResult.error(
            "timeout",
            f"The command was still running after {caps.timeout_s:g} s (the limit) and was killed with "
            f"every process it started. Output so far: {report}",
        )
    if outcome.flooded:
        mark = max(FLOOD_MIN_BYTES, FLOOD_FACTOR * caps.output_chars)
        return ToolResult.error(
            "output_limit",
            f"The command wrote more than {mark / 1e6:.1f} MB and was stopped. Send long output to a file in "
            f"the workspace and read parts of it (head, tail, grep). Output so far: {report}",
        )
    return ToolResult(ok=True, content=report)


def _in_words(content: str) -> str | None:
    """A run said for a person: how it ended and the start of what it printed."""
    try:
        data = json.loads(content)
        code = data["exit_code"]
    except (ValueError, KeyError, TypeError):
        return None
    shown = str(data.get("stdout") or "").strip() or (str(data.get("stderr") or "").strip() if code else "")
    said = "The command finished" if code == 0 else f"The command failed with exit code {code}"
    if not shown:
        return said + "."
    cut = "\n…" if len(shown) > PLAIN_CHARS else ""
    return f"{said}; it printed:\n{shown[:PLAIN_CHARS]}{cut}"


def _prepare(
    settings: ExecSettings, ctx: ToolContext, program: str
) -> tuple[Setup, Path, list[Path]] | ToolResult:
    """The sandbox's setup, the workspace and what to hide, or why the call cannot run (file system
    work: in a thread)."""
    setup = setup_of(settings)
    if isinstance(setup, str):
        return ToolResult.error("sandbox_unavailable", f"Commands cannot run here: {setup}")
    if not Path(program).exists():
        return ToolResult.error("not_available", f"There is no {program} on this host to run it with.")
    workspace = workspace_of(ctx)
    unsafe = workspace_problem(ctx.settings, workspace)
    if unsafe is not None:
        return ToolResult.error("unsafe_workspace", f"Commands cannot run here: {unsafe}")
    return setup, workspace, hidden_places(ctx.settings, settings.allow_network)


async def _run(
    settings: ExecSettings, ctx: ToolContext, argv: list[str], timeout_s: float | None
) -> ToolResult:
    # First: a member's call never reaches the sandbox's set-up, let alone a process.
    if not ctx.authority.may_run_code:
        return ToolResult.error(
            "not_allowed",
            "Only the bot's owners may run commands and code. Answer without running anything.",
        )
    prepared = await asyncio.to_thread(_prepare, settings, ctx, argv[0])
    if isinstance(prepared, ToolResult):
        return prepared
    setup, workspace, hidden = prepared
    caps = Caps.of(settings, timeout_s)
    return _result(await run_sandboxed(setup, caps, argv, workspace, hidden), caps)


def _describe_sandbox(settings: ExecSettings) -> str:
    network = "it can reach the network" if settings.allow_network else "there is no network"
    return (
        f"in a sandbox: /workspace is the workspace (the current folder, and the only place kept), /tmp is "
        f"private and emptied after each call, {network}. At most {settings.max_memory_mb} MB of memory "
        f"and {settings.max_processes} processes; stdout and stderr are each cut after "
        f"{settings.max_output_chars} characters."
    )


def exec_tools(settings: ExecSettings) -> tuple[Tool, ...]:
    # The runner's own timeout must not cut a run before its deadline and clean-up are through.
    tool_timeout = settings.max_timeout_s + 2 * GRACE_S + 5

    async def run_command(args: RunCommandArgs, ctx: ToolContext) -> ToolResult:
        refused = _too_long(args.command, "command")
        if refused is not None:
            return refused
        return await _run(settings, ctx, ["/bin/sh", "-c", args.command], args.timeout_s)

    async def run_python(args: RunPythonArgs, ctx: ToolContext) -> ToolResult:
        refused = _too_long(args.code, "code")
        if refused is not None:
            return refused
        # -I: no user site, no PYTHON* variables, no script folder on sys.path.
        return await _run(settings, ctx, [PYTHON, "-I", "-c", args.code], None)

    return (
        typed_tool(
            "run_command",
            f"Run a shell command {_describe_sandbox(settings)} Killed after timeout_s seconds "
            f"(at most {settings.max_timeout_s:g}).",
            RunCommandArgs,
            run_command,
            timeout_s=tool_timeout,
            plain=_in_words,
        ),
        typed_tool(
            "run_python",
            f"Run Python 3 code {_describe_sandbox(settings)} Killed after {settings.max_timeout_s:g} s. "
            "Only the standard library and the system's Python packages are there.",
            RunPythonArgs,
            run_python,
            timeout_s=tool_timeout,
            plain=_in_words,
        ),
    )
