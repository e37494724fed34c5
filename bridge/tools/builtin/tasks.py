"""Group `scheduled_tasks`: schedule a prompt to run later or on a cron schedule, list and cancel them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from bridge.errors import SessionKeyError
from bridge.sessions import keys
from bridge.store.tasks import TaskRow
from bridge.tasks.catalog import TaskCatalog, TaskError
from bridge.tools.arguments import Arguments, Text, typed_tool
from bridge.tools.base import ToolContext, ToolGroup, ToolResult

WHEN_HELP = (
    "When to run: a 5-field cron expression ('0 9 * * 1' = Mondays 09:00), an ISO date and time "
    "('2026-12-01 09:00'), or a relative time ('in 20 minutes', 'tomorrow 9:00', 'friday 17:30'). "
    "In the bot's time zone unless you add one ('0 9 * * * Europe/Berlin')."
)


class ScheduleTaskArgs(Arguments):
    prompt: Text = Field(description="What to do each time it runs, written as an instruction to yourself")
    when: Text = Field(description=WHEN_HELP)
    deliver_to: str | None = Field(
        None,
        description="Session key of the chat to post the answer in (default: this chat); only an "
        "owner's own chat may name another",
    )


class ListTasksArgs(Arguments):
    include_ended: bool = Field(False, description="Also list tasks that ended (fired once, or cancelled)")


class CancelTaskArgs(Arguments):
    task_id: Text = Field(description="The task's id, as schedule_task or list_tasks gave it")


def task_dict(service: TaskCatalog, task: TaskRow) -> dict[str, Any]:
    nxt = task.next_due
    return {
        "task_id": task.id,
        "prompt": task.prompt,
        "schedule": service.describe(task),
        "next_run": None if nxt is None else datetime.fromtimestamp(nxt, UTC).isoformat(timespec="seconds"),
        "deliver_to": task.deliver_to,
        "state": task.state,
    }


def _chat_problem(key: str) -> str | None:
    """Why `key` names no chat a task can post in, or None. A chat nobody has written in yet is
    fine where its key says where it is (a group, a channel, a Telegram DM)."""
    try:
        parsed = keys.parse(key)
    except SessionKeyError as exc:
        return f"{exc}. Use a chat's session key, e.g. 'main' or 'telegram:group:-1001234567890'."
    if parsed.kind in ("cron", "hook", "node", "agent"):
        return f"'{key}' is not a chat: give the session key of a chat, e.g. 'main'."
    return None


def _service(ctx: ToolContext) -> TaskCatalog | ToolResult:
    if ctx.tasks is None:
        return ToolResult.error("unavailable", "Scheduled tasks are not available here.")
    return ctx.tasks


async def _schedule_task(args: ScheduleTaskArgs, ctx: ToolContext) -> ToolResult:
    service = _service(ctx)
    if isinstance(service, ToolResult):
        return service
    target = None
    if args.deliver_to and args.deliver_to != ctx.session.key:
        target = ctx.authorities.canonical(args.deliver_to.strip())
        if not ctx.authority.may_deliver_to(target):
            # As for a chat that does not exist: other chats' existence is not told either.
            return ToolResult.error(
                "not_found", f"No chat '{args.deliver_to}' this task may post in. Leave deliver_to out."
            )
        problem = _chat_problem(target)
        if problem is not None:
            return ToolResult.error("invalid", problem)
    try:
        task = await service.create(ctx.authority, args.prompt, args.when, target)
    except TaskError as exc:
        return ToolResult.error("invalid", str(exc))
    return ToolResult.success({"status": "scheduled", **task_dict(service, task)})


async def _list_tasks(args: ListTasksArgs, ctx: ToolContext) -> ToolResult:
    service = _service(ctx)
    if isinstance(service, ToolResult):
        return service
    # The chat the run acts in: a task's firing lists the tasks of the chat it works for.
    tasks = await service.tasks_of(ctx.authority.chat, live_only=not args.include_ended)
    return ToolResult.success({"tasks": [task_dict(service, task) for task in tasks]})


async def _cancel_task(args: CancelTaskArgs, ctx: ToolContext) -> ToolResult:
    service = _service(ctx)
    if isinstance(service, ToolResult):
        return service
    try:
        task = await service.cancel(args.task_id, ctx.authority)
    except TaskError as exc:
        return ToolResult.error("not_found", str(exc))
    return ToolResult.success({"status": "cancelled", **task_dict(service, task)})


schedule_task = typed_tool(
    "schedule_task",
    "Schedule a prompt to run later, once or repeatedly; its answer is posted in this chat (or "
    "deliver_to). Use it for reminders and recurring summaries.",
    ScheduleTaskArgs,
    _schedule_task,
)
list_tasks = typed_tool(
    "list_tasks", "List this chat's scheduled tasks with their next run.", ListTasksArgs, _list_tasks
)
cancel_task = typed_tool(
    "cancel_task", "Cancel one of this chat's scheduled tasks.", CancelTaskArgs, _cancel_task
)


def tasks_group() -> ToolGroup:
    return ToolGroup(
        name="scheduled_tasks",
        # Short on purpose: each word is in every request's group listing, and a longer line tipped
        # the 0.5B test model out of calling get_current_time in text mode (tests/real_llm).
        description="Reminders and scheduled tasks: run a prompt later or on a schedule",
        tools=(schedule_task, list_tasks, cancel_task),
    )
