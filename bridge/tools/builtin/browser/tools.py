"""The browser group's five tools: open, snapshot, click, type and screenshot, on the session's Tab."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

from pydantic import Field

from bridge.tools.arguments import Arguments, Positive, Text, typed_tool
from bridge.tools.base import Tool, ToolContext, ToolResult
from bridge.tools.builtin.browser.failure import BrowserFailure
from bridge.tools.builtin.browser.guard import Refusal, parse
from bridge.tools.builtin.browser.session import BrowserManager
from bridge.tools.builtin.browser.snapshot import page_header, render, untrusted
from bridge.tools.builtin.workspace import workspace_of

# Where screenshot() saves, inside the workspace.
SCREENSHOTS = "screenshots"
# Refused requests named in a result; the rest are counted.
REFUSALS_SHOWN = 3
# The time a call may take beyond its own timeout_s: starting Chromium on first use.
START_ALLOWANCE_S = 30.0
NEXT = "Call snapshot() to read the page and number its links, buttons and fields."


class OpenArgs(Arguments):
    url: Text = Field(description="The http:// or https:// address to open.")


class NoArgs(Arguments):
    pass


class ClickArgs(Arguments):
    n: Positive = Field(description="The element's number in the last snapshot.")


class TypeArgs(Arguments):
    n: Positive = Field(description="The field's number in the last snapshot.")
    text: str = Field(
        max_length=10_000, description="What to put in it (replaces its content; for a list, the option)."
    )


def _refused_note(refusals: list[Refusal]) -> str:
    if not refusals:
        return ""
    shown = sorted({r.message for r in refusals})
    lines = [f"The guard refused {len(refusals)} request(s) of this page:"]
    lines += [f"- {message}" for message in shown[:REFUSALS_SHOWN]]
    if len(shown) > REFUSALS_SHOWN:
        lines.append(f"- and {len(shown) - REFUSALS_SHOWN} more")
    return "\n" + "\n".join(lines)


def browser_tools(manager: BrowserManager) -> tuple[Tool, ...]:
    """The group's tools, each acting on the calling session's context in `manager`."""
    settings = manager.settings
    timeout_s = settings.timeout_s * 2 + START_ALLOWANCE_S

    async def _open(args: OpenArgs, ctx: ToolContext) -> ToolResult:
        checked = parse(args.url, page=True)
        if isinstance(checked, Refusal):
            return ToolResult.error(checked.code, checked.message)
        try:
            async with manager.use(ctx.session.id) as tab:
                url, title, status, refused = await tab.open(args.url)
        except BrowserFailure as failure:
            return failure.result()
        # The refused hosts are the page's choice of words too: inside the block.
        return ToolResult.success(
            untrusted(page_header(url, title, status) + _refused_note(refused)) + "\n" + NEXT
        )

    async def _snapshot(args: NoArgs, ctx: ToolContext) -> ToolResult:
        try:
            async with manager.use(ctx.session.id) as tab:
                snapshot = await tab.snapshot(settings.max_chars)
        except BrowserFailure as failure:
            return failure.result()
        return ToolResult.success(render(snapshot, settings.max_chars))

    async def _click(args: ClickArgs, ctx: ToolContext) -> ToolResult:
        try:
            async with manager.use(ctx.session.id) as tab:
                url, title, refused = await tab.click(args.n)
        except BrowserFailure as failure:
            return failure.result()
        return ToolResult.success(
            f"Clicked [{args.n}]. Now showing:\n"
            + untrusted(page_header(url, title) + _refused_note(refused))
            + "\nNumbers from earlier snapshots may now be stale. "
            + NEXT
        )

    async def _type(args: TypeArgs, ctx: ToolContext) -> ToolResult:
        try:
            async with manager.use(ctx.session.id) as tab:
                tag, _kind = await tab.type(args.n, args.text)
        except BrowserFailure as failure:
            return failure.result()
        if tag == "select":
            return ToolResult.success(f"Chose {args.text!r} in [{args.n}].")
        return ToolResult.success(
            f"Typed {len(args.text)} characters into [{args.n}]. Click the form's button to submit it."
        )

    async def _screenshot(args: NoArgs, ctx: ToolContext) -> ToolResult:
        root = workspace_of(ctx)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        relative = Path(SCREENSHOTS) / f"browser-{stamp}-{secrets.token_hex(3)}.png"
        path = root / relative
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        try:
            async with manager.use(ctx.session.id) as tab:
                url, _title = await tab.screenshot(path)
        except BrowserFailure as failure:
            return failure.result()
        saved = f"Saved a screenshot of the page to '{relative.as_posix()}' in the workspace."
        if ctx.files is None:
            return ToolResult.success(f"{saved} This run has no chat to send it to.")
        # The caption is the bot's words: a page's own title could say anything to the chat.
        host = parse(url, page=True)
        caption = f"Screenshot of {host.hostname}" if not isinstance(host, Refusal) else "Screenshot"
        sent = await ctx.files.send_file(ctx.session, path, caption)
        if not sent.ok:
            return ToolResult.error(sent.code or "send_failed", f"{saved} Sending it failed: {sent.content}")
        return ToolResult.success(f"{saved} Sent it to the chat.")

    return (
        typed_tool(
            "open",
            "Open a web page (http or https) in this chat's browser. Then call snapshot() to read it.",
            OpenArgs,
            _open,
            timeout_s=timeout_s,
        ),
        typed_tool(
            "snapshot",
            "Read the open page: its visible text, and its links, buttons and fields numbered for "
            "click and type. Numbers change when the page does: take a new snapshot after each change.",
            NoArgs,
            _snapshot,
            timeout_s=timeout_s,
        ),
        typed_tool(
            "click",
            "Click element n of the last snapshot (a link, button, checkbox ...).",
            ClickArgs,
            _click,
            timeout_s=timeout_s,
        ),
        typed_tool(
            "type",
            "Put text into field n of the last snapshot (replacing its content), or choose an option of "
            "a list. Then click the form's button to submit.",
            TypeArgs,
            _type,
            timeout_s=timeout_s,
        ),
        typed_tool(
            "screenshot",
            "Take a picture of what the open page shows, save it in the workspace and send it to this chat.",
            NoArgs,
            _screenshot,
            timeout_s=timeout_s,
        ),
    )
