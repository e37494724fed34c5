"""send_file: a workspace file sent to the chat as a document (or a photo), in the files group."""

from __future__ import annotations

import asyncio

from pydantic import Field

from bridge.errors import OutsideWorkspaceError
from bridge.tools.arguments import Arguments, PathText, typed_tool
from bridge.tools.base import ToolContext, ToolResult
from bridge.tools.builtin.workspace import resolve_in_workspace, workspace_of

CAPTION_MAX = 4000


class SendFileArgs(Arguments):
    path: PathText = Field(description="Path relative to the workspace, e.g. reports/summary.pdf")
    caption: str | None = Field(None, max_length=CAPTION_MAX, description="Text sent with the file.")


async def _send_file(args: SendFileArgs, ctx: ToolContext) -> ToolResult:
    if ctx.files is None:
        return ToolResult.error("no_chat", "This run has no chat to send a file to.")
    try:
        target = resolve_in_workspace(workspace_of(ctx), args.path)
    except OutsideWorkspaceError as exc:
        return ToolResult.error("outside_workspace", str(exc))
    if not await asyncio.to_thread(target.is_file):
        return ToolResult.error("not_found", f"No file at '{args.path}' in the workspace.")
    return await ctx.files.send_file(ctx.session, target, args.caption or "")


send_file = typed_tool(
    "send_file",
    "Send a file from the workspace to this chat, as a document (images as a photo), with an optional "
    "caption. Use it when the user asks for a file itself, not its text.",
    SendFileArgs,
    _send_file,
)
