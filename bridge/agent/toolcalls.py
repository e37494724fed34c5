"""Tool calls in a run: check a call against the loaded tools, run it in time, store it with its result."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from bridge.config import Settings
from bridge.jsonutil import loads
from bridge.llm.base import ChatMessage, ToolCall
from bridge.store.base import ToolExchange
from bridge.store.messages import dumps
from bridge.store.tables import DatabaseStore
from bridge.tools.arguments import validate_arguments
from bridge.tools.base import Tool, ToolContext, ToolResult
from bridge.tools.registry import ToolRegistry

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ToolStep:
    """A tool call as the activity display shows it."""

    call_id: str
    name: str
    summary: str
    status: Literal["running", "ok", "error"] = "running"
    error_code: str | None = None


class RunObserver(Protocol):
    async def tool_started(self, step: ToolStep) -> None: ...

    async def tool_finished(self, step: ToolStep) -> None: ...


class NullObserver:
    async def tool_started(self, step: ToolStep) -> None:
        return None

    async def tool_finished(self, step: ToolStep) -> None:
        return None


def summarize_arguments(arguments: str, limit: int = 60) -> str:
    """A short, one-line view of a call's arguments for the activity display."""
    try:
        value = loads(arguments or "{}")
    except ValueError:
        return "…malformed arguments"
    if isinstance(value, dict):
        text = ", ".join(f"{k}={_short(v)}" for k, v in value.items())
    else:
        text = _short(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= 30 else text[:29] + "…"


class ToolCaller:
    """Runs the tool calls of one runner's runs; every refusal reads the same to the model."""

    def __init__(self, settings: Settings, store: DatabaseStore, registry: ToolRegistry) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry

    async def call(
        self,
        ctx: ToolContext,
        call: ToolCall,
        step: int,
        preamble: str,
        observer: RunObserver,
        writes: list[asyncio.Task[None]],
        registry: ToolRegistry | None = None,
    ) -> ToolResult:
        """Run the call and record it. The record's write is queued, not awaited: the next model
        request does not wait for the database. It goes into `writes`, which the run awaits before
        it finishes (so its own record comes after them, and a failed write still fails the run).
        `registry` is the registry as the run's agent sees it (ToolRegistry.only); None: all of it."""
        view = ToolStep(call.id, call.name, summarize_arguments(call.arguments))
        await observer.tool_started(view)
        result = await self.execute(ctx, call, registry)
        # Call and result are written in one transaction, as a task of its own: a cancel of the run
        # cannot split them, nor stop the write.
        writes.append(
            asyncio.ensure_future(
                self.store.add_tool_exchange(
                    ctx.session.id,
                    ctx.run_id,
                    ToolExchange(
                        call_id=call.id,
                        tool_name=call.name,
                        tool_input=stored_input(call.arguments),
                        result=result.content,
                        status=result.status,
                        step=step,
                        preamble=preamble,
                    ),
                )
            )
        )
        view.status, view.error_code = ("ok", None) if result.ok else ("error", result.code)
        await observer.tool_finished(view)
        return result

    async def execute(
        self, ctx: ToolContext, call: ToolCall, registry: ToolRegistry | None = None
    ) -> ToolResult:
        registry = registry or self.registry
        try:
            args = loads(call.arguments or "{}")
        except ValueError as exc:
            return ToolResult.error(
                "invalid_arguments", f"Arguments are not valid JSON ({exc}). Send a JSON object."
            )
        if not isinstance(args, dict):
            return ToolResult.error("invalid_arguments", "Arguments must be a JSON object.")
        # Recomputed per call: a group loaded earlier in this same response is usable at once.
        active: dict[str, Tool] = {t.name: t for t in registry.active_tools(ctx.loaded_groups)}
        tool = active.get(call.name)
        if tool is None:
            return self.unavailable(ctx, call.name, active, registry)
        # One check for every tool, so the model always reads the same kind of answer to a bad call.
        checked = validate_arguments(tool, args)
        if isinstance(checked, ToolResult):
            return checked
        timeout = self.settings.tools.timeouts.get(
            tool.name, tool.timeout_s or self.settings.tools.default_timeout_s
        )
        try:
            async with asyncio.timeout(timeout):
                return await tool.run(checked, ctx)
        except TimeoutError:
            on = f" on {tool.origin}" if tool.origin else ""
            return ToolResult.error("timeout", f"{tool.name}{on} did not finish within {timeout:g} s.")
        except Exception as exc:  # a tool bug must not break the run or the session
            log.exception("tool %s failed", tool.name)
            on = f" on {tool.origin}" if tool.origin else ""
            return ToolResult.error("tool_failed", f"{tool.name}{on} failed: {type(exc).__name__}: {exc}")

    def unavailable(
        self, ctx: ToolContext, name: str, active: dict[str, Tool], registry: ToolRegistry
    ) -> ToolResult:
        if registry.withheld(name):
            return ToolResult.error("not_available", f"Tool group '{name}' is not available in this chat.")
        called = registry.group(name)
        if called is not None:
            tools = ", ".join(t.name for t in registry.tools_of(called))
            return ToolResult.error(
                "not_loaded",
                f"'{name}' is a tool group, not a tool. Call load_tool_group with group_name='{name}', "
                + (f"then call one of its tools: {tools}." if tools else "then call one of its tools."),
            )
        skill = ctx.skill_catalog.get(name)
        if skill is not None and registry.get("load_skill") is not None:
            # Small models call a skill's name like a tool, as they do a group's.
            return ToolResult.error(
                "not_loaded",
                f"'{skill.name}' is a skill, not a tool. Call load_skill with name='{skill.name}' to "
                "read its instructions.",
            )
        group = registry.group_of(name)
        if group is not None:
            return ToolResult.error(
                "not_loaded",
                f"Tool '{name}' belongs to tool group '{group}', which is not loaded yet. "
                f"Call load_tool_group with group_name='{group}', then call {name} again.",
            )
        return ToolResult.error(
            "unknown_tool",
            f"There is no tool named '{name}'. Callable now: {', '.join(active)}. "
            "Other tools come in groups: see 'Available Tool Groups' and use load_tool_group.",
        )


def not_run(call: ToolCall) -> ChatMessage:
    return ChatMessage(
        "tool", "Not run: the run was stopped before this call.", tool_call_id=call.id, name=call.name
    )


def stored_input(arguments: str) -> str:
    """Valid JSON is stored normalized (so restoration reads it); anything else verbatim."""
    try:
        return dumps(loads(arguments or "{}"))
    except ValueError:
        return arguments
