"""The task catalogue: making, listing and cancelling scheduled tasks, for the scheduled_tasks tools,
the /tasks command and the CLI. Firing them is bridge.jobs.tasks' (above the agent); this module knows
nothing of runs, so the tools and the agent never reach the runner through it."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from bridge.config import Settings
from bridge.sessions.authority import Authorities, Authority
from bridge.sessions.service import chat_route
from bridge.store.tables import DatabaseStore
from bridge.store.tasks import LIVE_STATES, TaskRow
from bridge.tasks.when import Schedule, WhenError, next_fire, parse_when, shortest_gap

# What kind of refusal a TaskError is: the admin API answers each with its own status (400, 404, 409,
# 403); the tools and commands show the words alone.
Refusal = Literal["invalid", "unknown", "ended", "refused"]


class TaskError(Exception):
    """Why a task cannot be made or changed, in words the model (and the person) can act on. `reason`
    says which kind of refusal it is; `task` is the task it is about, where the caller may see it."""

    def __init__(self, message: str, reason: Refusal = "invalid", task: TaskRow | None = None) -> None:
        super().__init__(message)
        self.reason: Refusal = reason
        self.task = task


class TaskCatalog:
    """Makes, lists and cancels tasks. `wake` is called when a task was made or asked to run now: the
    runner that fires tasks (bridge.jobs.tasks.TaskService, which is a TaskCatalog) looks at once."""

    def __init__(self, settings: Settings, store: DatabaseStore, *, clock: Callable[[], float]) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        # Who the owners are (the composition root adds the console's).
        self.authorities = Authorities(settings.owners)

    def wake(self) -> None:
        """Nothing fires tasks here; the runner overrides this to look at once."""

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    async def create(
        self, authority: Authority, prompt: str, when: str, deliver_to: str | None = None
    ) -> TaskRow:
        """A new task made by a run acting with `authority`, answering in `deliver_to` (default: the
        chat it acts in). Its firings act with that authority; it counts against the chat where the
        chain began, and, for a member, against what that member may have waiting there."""
        if not prompt.strip():
            raise TaskError("The prompt is empty: say what the task should do when it runs.")
        target = deliver_to or authority.chat
        if not authority.may_deliver_to(target):
            # Said as for a chat that does not exist: other chats' existence is not leaked either.
            raise TaskError(
                f"A task made here can only post in this chat, not in '{target}'. Leave deliver_to out."
            )
        try:
            schedule = parse_when(when, now=self.now(), default_zone=self.settings.agent.timezone)
        except WhenError as exc:
            raise TaskError(str(exc)) from None
        first = next_fire(schedule, self.now())
        if first is None:
            raise TaskError(f"'{when}' never comes: give a time in the future.")
        rules = self.settings.tasks
        if authority.member_rules:
            self._member_may(schedule, rules.members_recurring, rules.member_min_interval_s)
        route = await chat_route(self.store, self.authorities.canonical(target))
        task = TaskRow(
            id=secrets.token_hex(4),
            chat_key=authority.origin,
            deliver_to=target,
            prompt=prompt.strip(),
            kind=schedule.kind,
            expression=schedule.expression,
            zone=schedule.zone,
            state="active",
            created_at=self.clock(),
            next_due=first.timestamp(),
            route=None if route is None else route.to_json(),
            authority=authority.to_json(),
            maker=authority.person,
        )
        per_member = rules.max_per_member if authority.member_rules else None
        added = await self.store.add_task(task, max_per_chat=rules.max_per_chat, max_per_maker=per_member)
        if added == "chat_full":
            raise TaskError(
                f"This chat already has {rules.max_per_chat} scheduled tasks, the most it may have "
                "([tasks] max_per_chat). Cancel one with cancel_task first."
            )
        if added == "maker_full":
            raise TaskError(
                f"You already have {rules.max_per_member} scheduled tasks waiting in this chat, the most "
                "a member may have ([tasks] max_per_member). Cancel one with cancel_task first."
            )
        self.wake()
        return task

    def _member_may(self, schedule: Schedule, recurring: bool, min_interval_s: float) -> None:
        """The members' rule in a shared chat: one-shot tasks, recurring ones only where the config
        allows them, and never more often than it allows."""
        if schedule.kind == "once":
            return
        if not recurring:
            raise TaskError(
                "In a shared chat only an owner may make a recurring task; members may schedule "
                "one-time reminders ('tomorrow 9:00', 'in 2 hours')."
            )
        gap = shortest_gap(schedule, self.now())
        if gap is not None and gap < min_interval_s:
            raise TaskError(
                f"That would run every {gap / 60:g} minutes; in a shared chat a member's task may run "
                f"at most every {min_interval_s / 60:g} minutes ([tasks] member_min_interval_s)."
            )

    async def tasks_of(self, chat_key: str | None, *, live_only: bool = True) -> list[TaskRow]:
        """Tasks made in or delivered to a chat (all chats' for None): live ones, or all."""
        return await self.store.list_tasks(chat_key, live_only=live_only)

    async def _may_change(self, task_id: str, authority: Authority) -> TaskRow:
        """The live task `task_id`, where `authority` may change it (cancel, pause, resume, run it now):
        its maker and the owners, in the chat it was made in or posts in (the operator anywhere). One
        rule for the tool, /tasks cancel, the CLI and the dashboard."""
        task = await self.store.get_task(task_id.strip())
        if task is None or not authority.may_see_task(task.chat_key, task.deliver_to):
            raise TaskError(
                f"No scheduled task {task_id} here. list_tasks shows this chat's tasks.", "unknown"
            )
        if task.state not in LIVE_STATES:
            # Said as for a task that does not exist (to the model and in a chat); the reason and the
            # task let the dashboard say it has ended.
            raise TaskError(
                f"No scheduled task {task_id} here. list_tasks shows this chat's tasks.", "ended", task
            )
        if not authority.may_cancel(maker=task.maker, chat=task.chat_key, deliver_to=task.deliver_to):
            raise TaskError(
                f"Task {task.id} was made by someone else: only they or an owner of this bot can cancel it.",
                "refused",
                task,
            )
        return task

    async def cancel(self, task_id: str, authority: Authority) -> TaskRow:
        """Cancel a live task: it never fires again."""
        task = await self._may_change(task_id, authority)
        ended = await self.store.end_task(task.id, "cancelled")
        if ended is None:
            raise TaskError(f"Task {task_id} has just ended.", "ended", task)
        return ended

    async def pause(self, task_id: str, authority: Authority) -> TaskRow:
        """Pause a live task: it keeps its schedule and fires nothing until resumed (a paused task is
        paused already)."""
        task = await self._may_change(task_id, authority)
        paused = await self.store.end_task(task.id, "paused")
        if paused is None:
            raise TaskError(f"Task {task_id} has just ended.", "ended", task)
        return paused

    async def resume(self, task_id: str, authority: Authority) -> TaskRow:
        """Resume a paused task (an active one is left as it is) with its failures forgotten. Due times
        that passed while it was paused are skipped, not fired or told as missed: pausing asked for
        that. A one-time task whose time passed meanwhile fires now."""
        task = await self._may_change(task_id, authority)
        if task.state == "active":
            return task
        now = self.now()
        due = task.next_due
        if due is None or due < now.timestamp():
            try:
                following = next_fire(self.schedule_of(task), now)
            except (WhenError, ValueError) as exc:
                raise TaskError(
                    f"Task {task.id} can't be resumed: its schedule can't be read ({exc}). Cancel it and "
                    "make it again.",
                    "ended",
                    task,
                ) from None
            due = following.timestamp() if following is not None else now.timestamp()
        resumed = await self.store.resume_task(task.id, due)
        if resumed is None:
            raise TaskError(f"Task {task_id} has just ended.", "ended", task)
        self.wake()
        return resumed

    async def request_run(self, task_id: str, authority: Authority) -> TaskRow:
        """Ask for a firing now, outside the schedule (a paused task too): the running bot fires it
        within a few seconds, once, and the schedule stays as it is."""
        task = await self._may_change(task_id, authority)
        asked = await self.store.request_run(task.id, self.clock())
        if asked is None:
            raise TaskError(f"Task {task_id} has just ended.", "ended", task)
        self.wake()
        return asked

    @staticmethod
    def schedule_of(task: TaskRow) -> Schedule:
        return Schedule(task.kind, task.expression, task.zone)  # type: ignore[arg-type]

    @staticmethod
    def describe(task: TaskRow) -> str:
        """The task's schedule in words; one that cannot be read (the loop pauses such a task) is
        shown as written, so listings never fail on it."""
        try:
            return TaskCatalog.schedule_of(task).describe()
        except WhenError:
            return f"unreadable schedule `{task.expression}` ({task.zone})"
