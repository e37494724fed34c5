"""`bridge tasks list | cancel ID | run-now ID | pause ID | resume ID`: scheduled tasks from the command
line.

They work on the bot's database while `bridge run` is running: a cancel holds at once (a firing is
claimed only from an active task), and the running bot fires a run-now within a few seconds, once.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.cli.exits import EXIT_RUNTIME, fail
from bridge.config import Settings
from bridge.errors import StoreError

if TYPE_CHECKING:
    from bridge.store.tables import DatabaseStore
    from bridge.store.tasks import TaskRow


def add_parser(sub: Any, config_help: str) -> None:
    """The `tasks` command and its subcommands, on the `bridge` parser's subparsers."""
    tasks = sub.add_parser(
        "tasks",
        help="scheduled tasks: list them with their next run, cancel, pause or resume one, or fire one now",
        description=(
            "Tasks are made by the agent's schedule_task tool. These commands work while `bridge run` "
            "runs: a cancel holds at once, and the running bot fires a run-now within a few seconds."
        ),
    )
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True, metavar="SUBCOMMAND")
    listing = tasks_sub.add_parser("list", help="the live tasks (--all: ended ones too), soonest first")
    listing.add_argument("--all", action="store_true", help="also tasks that fired once or were cancelled")
    listing.add_argument("--config", type=Path, help=config_help)
    for name, what in (
        ("cancel", "cancel a task: it never fires again"),
        ("run-now", "fire a task now, once, outside its schedule (which stays as it is)"),
        ("pause", "pause a task: it keeps its schedule and fires nothing until resumed"),
        ("resume", "resume a paused task; times that passed while it was paused are skipped"),
    ):
        command = tasks_sub.add_parser(name, help=what)
        command.add_argument("task_id", metavar="ID", help="the task's id, as `bridge tasks list` shows it")
        command.add_argument("--config", type=Path, help=config_help)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from bridge.store.backends import existing_store

    try:
        async with existing_store(settings.storage) as store:
            if args.tasks_command == "list":
                return _print_list(await store.list_tasks(None, live_only=not args.all))
            if args.tasks_command == "cancel":
                return await _cancel(store, args.task_id)
            if args.tasks_command in ("pause", "resume"):
                return await _pause_or_resume(settings, store, args.tasks_command, args.task_id)
            return await _run_now(store, args.task_id)
    except StoreError as exc:
        return fail(exc, settings)


def _print_list(tasks: list[TaskRow]) -> int:
    from bridge.tasks.catalog import TaskCatalog
    from bridge.tasks.when import when_text

    row = "{:<8}  {:<9}  {:<22}  {:<26}  {}"
    print(row.format("id", "state", "next run", "made in", "posts to"))
    for task in tasks:
        nxt = when_text(task.next_due, task.zone) if task.next_due is not None else "-"
        print(row.format(task.id, task.state, nxt, task.chat_key, task.deliver_to))
        print(f"          {TaskCatalog.describe(task)}: {' '.join(task.prompt.split())[:100]}")
    if not tasks:
        print("(none)")
    return 0


def _not_live(task_id: str) -> int:
    print(f"bridge: no live task {task_id!r}; `bridge tasks list` shows them", file=sys.stderr)
    return EXIT_RUNTIME


async def _cancel(store: DatabaseStore, task_id: str) -> int:
    task = await store.end_task(task_id.strip(), "cancelled")
    if task is None:
        return _not_live(task_id)
    print(f"cancelled task {task.id}: it never fires again")
    return 0


async def _run_now(store: DatabaseStore, task_id: str) -> int:
    task = await store.request_run(task_id.strip(), time.time())
    if task is None:
        return _not_live(task_id)
    now = time.time()
    running = any(worker.alive(now) for worker in await store.workers())
    if running:
        print(f"task {task.id} fires within a few seconds; its answer goes to {task.deliver_to}")
    else:
        print(f"task {task.id} fires when `bridge run` starts (it is not running now)")
    return 0


async def _pause_or_resume(settings: Settings, store: DatabaseStore, action: str, task_id: str) -> int:
    """Through the catalogue, as the operator: the same rules as the dashboard's buttons."""
    from bridge.tasks.catalog import TaskCatalog, TaskError

    catalog = TaskCatalog(settings, store, clock=time.time)
    operator = catalog.authorities.operator()
    try:
        if action == "pause":
            task = await catalog.pause(task_id.strip(), operator)
        else:
            task = await catalog.resume(task_id.strip(), operator)
    except TaskError as exc:
        if exc.reason == "ended" and exc.task is not None:
            print(f"bridge: task {exc.task.id} is {exc.task.state}: it can't be {action}d", file=sys.stderr)
            return EXIT_RUNTIME
        if exc.reason == "unknown":
            return _not_live(task_id)
        print(f"bridge: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    if task.state == "paused":
        print(f"paused task {task.id}: it fires nothing until `bridge tasks resume {task.id}`")
    else:
        print(f"resumed task {task.id}: {TaskCatalog.describe(task)}")
    return 0
