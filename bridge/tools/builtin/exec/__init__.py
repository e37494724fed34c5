"""The `exec` group: run_command and run_python, each call in a bubblewrap sandbox.

Off by default ([tools.exec] enabled). The sandbox sees the workspace (read-write, at /workspace), the
host's /usr read-only, a made-up /etc, a private /tmp, and no network unless allow_network; nothing of
Bridge's own: not its config, database, media or environment. Each call is capped in time, memory,
processes and output. Where bwrap is missing or cannot make a sandbox, every call is refused and
`sandbox_problem` says why (fail closed).

Modules: `sandbox` (bwrap's argv, a run under caps), `probe` (whether a sandbox can be made here),
`cgroup` (a cgroup per call, the cap on processes that holds for root), `output` (capped capture),
`places` (what of the host is shown, and what of Bridge's never is), `tools` (the two tools). Imports
bridge.config and bridge.tools only.
"""

from __future__ import annotations

from pathlib import Path

from bridge.config import Settings
from bridge.config.tools import ExecSettings
from bridge.tools.base import ToolGroup
from bridge.tools.builtin.exec.places import workspace_problem
from bridge.tools.builtin.exec.probe import sandbox_problem
from bridge.tools.builtin.exec.tools import exec_tools


def exec_group(settings: ExecSettings) -> ToolGroup:
    """The `exec` group with the caps of `settings` (registered only when [tools.exec] enabled)."""
    return ToolGroup(
        name="exec",
        description="Run shell commands and Python code in a sandbox confined to the workspace",
        tools=exec_tools(settings),
        display_name="Exec",
    )


def exec_problem(settings: Settings) -> str | None:
    """Why the enabled `exec` group cannot run here (no sandbox, or a workspace that holds Bridge's
    own files): `bridge run` starts anyway and its tools refuse each call (fail closed), so
    check-config and the dashboard's Tools page say why. None when it is off or works."""
    if not settings.tools.exec.enabled:
        return None
    if problem := sandbox_problem(settings.tools.exec):
        return f"tools.exec: enabled, but commands cannot run: {problem}"
    if problem := workspace_problem(settings, Path(settings.tools.workspace)):
        return f"tools.workspace: commands cannot run: {problem}"
    return None


__all__ = ["exec_group", "exec_problem", "sandbox_problem", "workspace_problem"]
