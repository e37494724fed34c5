"""spawn_agent (group `sessions`): a sub-agent that works on one task in a session of its own.

The run behind it is bridge.gateway.subagents; this module is the tool's face: its arguments, and the
refusals that need no service (depth 1, a run answering another agent).
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import Field

from bridge.tools.arguments import Arguments, Text, typed_tool
from bridge.tools.base import AGENT_CHANNEL, SUBAGENT_CHANNEL, ToolContext, ToolResult

# [agent] subagent_wait_s is at most this; the tool's own time limit leaves room beyond it, so the
# wait ends with what is known rather than as a tool timeout.
SPAWN_WAIT_MAX_S = 600.0


class SpawnAgentArgs(Arguments):
    task: Text = Field(
        description="The whole task, with everything the sub-agent needs to know: it sees nothing of "
        "this chat or its history"
    )
    agent: Text | None = Field(
        None, description="A configured agent to run it (its prompt, tools and model); default: this chat's"
    )
    wait: bool = Field(
        True,
        description="true (default): wait for the sub-agent's answer and get it as this tool's result. "
        "false: return at once; its answer is posted in this chat when it is done",
    )


def _is_subagent(ctx: ToolContext) -> bool:
    return ctx.channel == SUBAGENT_CHANNEL or not ctx.authority.may_spawn


def _offered(ctx: ToolContext) -> bool:
    # A sub-agent's run, or a run answering another session's agent, is never shown the tool.
    return not _is_subagent(ctx) and ctx.channel != AGENT_CHANNEL


async def _spawn_agent(args: SpawnAgentArgs, ctx: ToolContext) -> ToolResult:
    if _is_subagent(ctx):
        # Depth 1: a chain of sub-agents could grow without end, each one spending the chat's runs.
        return ToolResult.error(
            "not_allowed",
            "A sub-agent cannot start another sub-agent. Do this part of the task yourself, then "
            "answer with the result.",
        )
    if ctx.channel == AGENT_CHANNEL:
        return ToolResult.error(
            "not_allowed", "spawn_agent cannot be used while answering another session's agent."
        )
    if ctx.spawner is None:
        return ToolResult.error("unavailable", "Sub-agents are not available here.")
    return await ctx.spawner.spawn(
        ctx.session, ctx.run_id, ctx.authority, args.task, agent=args.agent, wait=args.wait
    )


spawn_agent = replace(
    typed_tool(
        "spawn_agent",
        "Start a sub-agent: it works on one task alone, in a session of its own, with your tools and at "
        "most your rights, and answers with the result. Give it the whole task: it sees nothing of this "
        "chat. It cannot start sub-agents itself.",
        SpawnAgentArgs,
        _spawn_agent,
        timeout_s=SPAWN_WAIT_MAX_S + 30,
    ),
    offered=_offered,
)
