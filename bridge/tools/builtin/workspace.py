"""The bot's workspace folder, where the files tools and send_file are confined."""

from __future__ import annotations

from pathlib import Path

from bridge.errors import OutsideWorkspaceError
from bridge.tools.base import ToolContext


def resolve_in_workspace(root: Path, user_path: str) -> Path:
    """The real path `user_path` names inside `root`, or OutsideWorkspaceError if it escapes.

    resolve() follows every symlink that exists, in the target and in any parent folder, and
    collapses `..`, so one is_relative_to check on the result covers traversal, absolute paths
    and escaping links alike. A dangling link is followed to where it points, so writing through
    a link to a not-yet-existing file outside is refused too.
    """
    real_root = root.resolve()
    # An absolute user_path replaces real_root in the join; it then passes only if it lies inside.
    candidate = (real_root / user_path).resolve()
    if not candidate.is_relative_to(real_root):
        raise OutsideWorkspaceError(f"'{user_path}' is outside the workspace; use a path relative to it.")
    return candidate


def workspace_of(ctx: ToolContext) -> Path:
    """The run's workspace: its agent's ([agents.NAME] workspace), else [tools] workspace."""
    root = Path(ctx.workspace if ctx.workspace is not None else ctx.settings.tools.workspace)
    # Created lazily so a bot that never touches files leaves no folder behind.
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()
