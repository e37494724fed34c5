"""Scheduled tasks: made by the agent's tools, fired once per due time in a `cron:<id>` session, and
answered through the outbox under the target chat's send policy."""

from __future__ import annotations

import asyncio
import logging
import secrets
from datetime import UTC, datetime

from bridge.sessions.authority import Authority
from bridge.sessions.keys import cron
from bridge.store.sessions import new_id
from bridge.store.tasks import FiringRow, FiringState, TaskRow
from bridge.tasks.loop import DueLoop
from bridge.tasks.when import Schedule, WhenError, next_fire, parse_when, shortest_gap, when_text

log = logging.getLogger(__name__)

# The channel a task's run is marked with (traces, runs); like an agent's, it has no person behind it.
TASK_CHANNEL = "task"
# Run statuses whose answer was stored and queued with the run's end ("stopped": cut short for going
# in circles, but answered).
ANSWERED = ("ok", "stopped")
# A cron task down for ages is caught up by walking its due times up to now, this many at most.
MAX_WALK = 10_000


class TaskError(Exception):
    """Why a task cannot be made or changed, in words the model (and the person) can act on."""


def task_prompt(task: TaskRow, due: float) -> str:
    """What a firing's run is asked: the task's prompt, with when and why it runs."""
    return (
        f"[Scheduled task {task.id}, due {when_text(due, task.zone)}. Your answer is posted to the chat "
        f"'{task.deliver_to}'.]\n\n{task.prompt}"
    )


def _own_route(task: TaskRow) -> str | None:
    """The stored route of the chat that made the task, where it is the chat the task answers in
    (the route stored with a task is its target's)."""
    return task.route if task.chat_key == task.deliver_to else None


class TaskService(DueLoop):
    """Makes, lists and cancels tasks for the tools, commands and CLI; fires them from a loop."""

    name = "tasks"

    # ------------------------------------------------------------------ for the tools and commands

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
        route = await self.headless.route(target)
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

    async def cancel(self, task_id: str, authority: Authority) -> TaskRow:
        """Cancel a live task: its maker and the owners may, in the chat it was made in or posts in
        (the operator anywhere). One rule for the tool, /tasks cancel and the CLI."""
        task = await self.store.get_task(task_id.strip())
        live = task is not None and task.state in ("active", "paused")
        if task is None or not live or not authority.may_see_task(task.chat_key, task.deliver_to):
            raise TaskError(f"No scheduled task {task_id} here. list_tasks shows this chat's tasks.")
        if not authority.may_cancel(maker=task.maker, chat=task.chat_key, deliver_to=task.deliver_to):
            raise TaskError(
                f"Task {task.id} was made by someone else: only they or an owner of this bot can cancel it."
            )
        ended = await self.store.end_task(task.id, "cancelled")
        if ended is None:
            raise TaskError(f"Task {task_id} has just ended.")
        return ended

    async def request_run(self, task_id: str) -> TaskRow:
        """Ask for a firing now, outside the schedule (`bridge tasks run-now`, from any process): the
        running bot fires it within a few seconds, once, and the schedule stays as it is."""
        task = await self.store.request_run(task_id.strip(), self.clock())
        if task is None:
            raise TaskError(f"No live task {task_id}; `bridge tasks list` shows them.")
        self.wake()
        return task

    @staticmethod
    def schedule_of(task: TaskRow) -> Schedule:
        return Schedule(task.kind, task.expression, task.zone)  # type: ignore[arg-type]

    @staticmethod
    def describe(task: TaskRow) -> str:
        """The task's schedule in words; one that cannot be read (the loop pauses such a task) is
        shown as written, so listings never fail on it."""
        try:
            return TaskService.schedule_of(task).describe()
        except WhenError:
            return f"unreadable schedule `{task.expression}` ({task.zone})"

    # ------------------------------------------------------------------ the loop

    async def start(self, *, alone: bool) -> None:
        """Begin firing. `alone`: no other process shares the database, so firings left running are
        a crash's: each is settled from its run's own row, never run twice."""
        if alone:
            for firing in await self.store.running_firings():
                await self._settle(firing)
        self.begin()

    async def next_due(self) -> float | None:
        return await self.store.next_due()

    async def tick(self) -> int:
        """Fire every task due by now, and every run asked for; the number of firings started. Runs
        go on in the background (see idle()); a task whose due time is past the catch-up window is
        recorded as missed."""
        now = self.clock()
        started = 0
        for task in await self.store.requested_runs():
            assert task.run_requested is not None
            run_id = new_id()
            if await self.store.claim_requested_run(task.id, task.run_requested, run_id, now):
                self.spawn(self._fire(task, task.run_requested, run_id), f"task:{task.id}")
                started += 1
        for task in await self.store.due_tasks(now):
            try:
                fired = await self._due(task, now)
            except Exception:
                # One task that cannot be worked out must not hold up the others, nor come round
                # again at once: it is paused, and the log says why.
                log.exception("task %s could not be fired; pausing it", task.id)
                await self.store.end_task(task.id, "paused")
                continue
            started += fired
        return started

    async def _due(self, task: TaskRow, now: float) -> bool:
        assert task.next_due is not None
        schedule = self.schedule_of(task)
        due, latest, skipped = task.next_due, task.next_due, 0
        # The newest due time not after now: a bot down for a while catches up once, not once per
        # due time it slept through.
        while skipped < MAX_WALK:
            after = next_fire(schedule, datetime.fromtimestamp(latest, UTC))
            if after is None or after.timestamp() > now:
                break
            latest, skipped = after.timestamp(), skipped + 1
        following_at = next_fire(schedule, datetime.fromtimestamp(max(latest, now), UTC))
        following = following_at.timestamp() if following_at else None
        late = now - latest
        if late > self.settings.tasks.catch_up_s:
            detail = f"{skipped + 1} due time(s) passed while the bot was down; the last {late:.0f} s late"
            if await self.store.claim_firing(task.id, due, following, now, state="missed", detail=detail):
                await self._tell_missed(task, latest, following)
            return False
        if skipped:
            note = f"{skipped} earlier due time(s) passed while the bot was down; ran the latest"
            if not await self.store.claim_firing(task.id, due, latest, now, state="missed", detail=note):
                return False
        run_id = new_id()
        if not await self.store.claim_firing(task.id, latest, following, now, run_id=run_id):
            return False
        self.spawn(self._fire(task, latest, run_id), f"task:{task.id}")
        return True

    async def _fire(self, task: TaskRow, due: float, run_id: str) -> None:
        """One firing: the prompt into the task's own session, a run there, the answer queued with the
        run's end (so a crash after it still delivers it, once) and sent."""
        try:
            outcome = await self.headless.run(
                key=str(cron(task.id)),
                prompt=task_prompt(task, due),
                sender="scheduler",
                channel=TASK_CHANNEL,
                run_id=run_id,
                deliver_to=task.deliver_to,
                fallback=task.route,
                authority=self.authorities.of_task(
                    task.authority, chat_key=task.chat_key, deliver_to=task.deliver_to, task_id=task.id
                ),
            )
        except asyncio.CancelledError:
            # Stopped with the bot: a run that never began is left for the next start to fire.
            await asyncio.shield(self._stopped(task, due, run_id))
            raise
        except Exception as exc:
            log.exception("task %s failed", task.id)
            await self._finish(task, due, "error", f"{type(exc).__name__}: {exc}"[:500])
            return
        if outcome.status == "not_begun":
            log.info("task %s: its firing due %s waits for the next start", task.id, due)
        elif outcome.status == "interrupted":
            await self._cut_short(task.id, due, "before it finished")
        else:
            await self._finish(task, due, outcome.status, outcome.detail)

    async def _stopped(self, task: TaskRow, due: float, run_id: str) -> None:
        """The bot stops while a firing is on: one whose run never began is left for the next start."""
        if await self.store.get_run(run_id) is not None:
            await self._cut_short(task.id, due, "by a shutdown")

    async def _settle(self, firing: FiringRow) -> None:
        """A firing a crash left running. Its run never began (no row: nothing was asked or sent): it
        runs now, still once, if it is not past the catch-up window. Its run ended (the answer was
        queued with that end, and the outbox's recovery sends it): ok. Otherwise it is interrupted,
        and the task's chat is told."""
        task = await self.store.get_task(firing.task_id)
        run = await self.store.get_run(firing.run_id) if firing.run_id else None
        if run is None and firing.run_id and task is not None and task.state in ("active", "paused"):
            late = self.clock() - firing.due_at
            if late > self.settings.tasks.catch_up_s:
                # As a due time the bot slept through.
                detail = f"never began before a restart; {late:.0f} s late by the next start"
                await self.store.finish_firing(
                    task.id, firing.due_at, "missed", self.clock(), run_id=None, detail=detail, pause_after=0
                )
                await self._tell_missed(
                    task, firing.due_at, task.next_due if task.state == "active" else None
                )
                return
            log.info(
                "task %s: its firing due %s never began before a restart; firing it now",
                task.id,
                firing.due_at,
            )
            self.spawn(self._fire(task, firing.due_at, firing.run_id), f"task:{task.id}")
        elif run is not None and run.status in ANSWERED:
            await self.store.finish_firing(
                firing.task_id, firing.due_at, "ok", self.clock(), run_id=None, detail=None, pause_after=0
            )
        else:
            await self._cut_short(firing.task_id, firing.due_at, "by a restart")

    async def _cut_short(self, task_id: str, due: float, why: str) -> None:
        """A firing whose run began and did not end: interrupted, never run again, and told."""
        log.warning("task %s: its firing due %s was cut short %s", task_id, due, why)
        task = await self.store.finish_firing(
            task_id, due, "interrupted", self.clock(), run_id=None, detail=f"cut short {why}", pause_after=0
        )
        if task is not None:
            await self._tell(
                task,
                f"⚠️ Scheduled task {task.id} was cut short {why} at {when_text(due, task.zone)} and was "
                f"not finished. {self._next_line(task)}",
                f"task-interrupted:{task.id}:{due}",
            )

    def _next_line(self, task: TaskRow) -> str:
        if task.state in ("active", "paused") and task.next_due is not None:
            return f"Next run: {when_text(task.next_due, task.zone)}."
        return "It will not run again."

    async def _finish(self, task: TaskRow, due: float, state: FiringState, detail: str | None) -> None:
        pause_after = self.settings.tasks.pause_after_failures
        after = await self.store.finish_firing(
            task.id, due, state, self.clock(), run_id=None, detail=detail, pause_after=pause_after
        )
        # Told once: on the failure that paused it, not on later ones of a task resumed meanwhile.
        paused_now = after is not None and after.state == "paused" and after.failures == pause_after
        if state == "error" and paused_now:
            await self._tell(
                task,
                f"⚠️ Scheduled task {task.id} failed {pause_after} times in a row and is paused. "
                f"Last error: {detail or 'unknown'}. Cancel it with /tasks cancel {task.id}.",
                f"task-paused:{task.id}:{due}",
            )

    async def _tell_missed(self, task: TaskRow, missed: float, following: float | None) -> None:
        nxt = f"Next run: {when_text(following, task.zone)}." if following else "It will not run again."
        await self._tell(
            task,
            f"Scheduled task {task.id} did not run at {when_text(missed, task.zone)}: the bot was down. "
            + nxt,
            f"task-missed:{task.id}:{missed}",
        )

    async def _tell(self, task: TaskRow, text: str, dedupe: str) -> None:
        """A notice to the chat that made the task, once per `dedupe`."""
        await self.headless.notice(task.chat_key, text, dedupe, fallback=_own_route(task))
