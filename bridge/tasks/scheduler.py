"""Scheduled tasks: made by the agent's tools, fired once per due time in a `cron:<id>` session, and
answered through the outbox under the target chat's send policy."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from bridge.config import Settings
from bridge.events import Outbound, Route
from bridge.sessions.keys import cron
from bridge.store.base import OutboxItem, SessionRow
from bridge.store.tables import DatabaseStore
from bridge.store.tasks import FiringState, TaskRow
from bridge.tasks.when import Schedule, WhenError, next_fire, parse_when

if TYPE_CHECKING:
    from bridge.agent.runner import AgentRunner
    from bridge.gateway.delivery import Delivery
    from bridge.gateway.lanes import Lanes

log = logging.getLogger(__name__)

# The channel a task's run is marked with (traces, runs); like an agent's, it has no person behind it.
TASK_CHANNEL = "task"
# The loop looks at the table at least this often, so a clock that jumps (a suspended host) or a task
# another process added is noticed without a wake-up.
MAX_SLEEP_S = 60.0
# A cron task down for ages is caught up by walking its due times up to now, this many at most.
MAX_WALK = 10_000
# After a pass that failed, the loop waits this long before the next: a fault that repeats (the
# database away) must not become a busy loop that floods the log.
RETRY_AFTER_S = 5.0


class TaskError(Exception):
    """Why a task cannot be made or changed, in words the model (and the person) can act on."""


def when_text(stamp: float | None, zone: str) -> str:
    if stamp is None:
        return "never again"
    return datetime.fromtimestamp(stamp, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


def task_prompt(task: TaskRow, due: float) -> str:
    """What a firing's run is asked: the task's prompt, with when and why it runs."""
    return (
        f"[Scheduled task {task.id}, due {when_text(due, task.zone)}. Your answer is posted to the chat "
        f"'{task.deliver_to}'.]\n\n{task.prompt}"
    )


class TaskService:
    """Makes, lists and cancels tasks for the tools and commands; fires them from a loop."""

    def __init__(
        self,
        settings: Settings,
        store: DatabaseStore,
        runner: AgentRunner,
        lanes: Lanes,
        delivery: Delivery,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.runner = runner
        self.lanes = lanes
        self.delivery = delivery
        self.clock = clock
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._firings: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ for the tools and commands

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    async def create(
        self, chat: SessionRow, prompt: str, when: str, deliver_to: SessionRow | None = None
    ) -> TaskRow:
        """A new task of `chat`, answering in `deliver_to` (default: the chat itself)."""
        if not prompt.strip():
            raise TaskError("The prompt is empty: say what the task should do when it runs.")
        try:
            schedule = parse_when(when, now=self.now(), default_zone=self.settings.agent.timezone)
        except WhenError as exc:
            raise TaskError(str(exc)) from None
        first = next_fire(schedule, self.now())
        if first is None:
            raise TaskError(f"'{when}' never comes: give a time in the future.")
        target = deliver_to or chat
        task = TaskRow(
            id=secrets.token_hex(4),
            chat_key=chat.key,
            deliver_to=target.key,
            prompt=prompt.strip(),
            kind=schedule.kind,
            expression=schedule.expression,
            zone=schedule.zone,
            state="active",
            created_at=self.clock(),
            next_due=first.timestamp(),
            route=target.last_route,
        )
        limit = self.settings.tasks.max_per_chat
        if not await self.store.add_task(task, max_per_chat=limit):
            raise TaskError(
                f"This chat already has {limit} scheduled tasks, the most it may have ([tasks] "
                "max_per_chat). Cancel one with cancel_task first."
            )
        self.wake()
        return task

    async def tasks_of(self, chat_key: str | None, *, live_only: bool = True) -> list[TaskRow]:
        """Tasks made in or delivered to a chat (all chats' for None): live ones, or all."""
        return await self.store.list_tasks(chat_key, live_only=live_only)

    async def cancel(self, task_id: str, chat_key: str | None) -> TaskRow:
        """Cancel a live task; one chat may cancel only its own (made there or delivered there)."""
        task = await self.store.get_task(task_id.strip())
        mine = task is not None and (chat_key is None or chat_key in (task.chat_key, task.deliver_to))
        if task is None or not mine or task.state not in ("active", "paused"):
            raise TaskError(f"No scheduled task {task_id} here. list_tasks shows this chat's tasks.")
        ended = await self.store.end_task(task.id, "cancelled")
        if ended is None:
            raise TaskError(f"Task {task_id} has just ended.")
        return ended

    @staticmethod
    def schedule_of(task: TaskRow) -> Schedule:
        return Schedule(task.kind, task.expression, task.zone)  # type: ignore[arg-type]

    def describe(self, task: TaskRow) -> str:
        return self.schedule_of(task).describe()

    # ------------------------------------------------------------------ the loop

    async def start(self, *, alone: bool) -> None:
        """Begin firing. `alone`: no other process shares the database, so firings left running
        belong to a crash of this bot and are marked interrupted (never run twice)."""
        if alone:
            for firing in await self.store.interrupt_firings(self.clock()):
                log.warning("task %s: its firing due %s was interrupted", firing.task_id, firing.due_at)
        self._loop = asyncio.create_task(self._run(), name="tasks")

    def wake(self) -> None:
        self._wake.set()

    async def halt(self) -> None:
        """Fire nothing more; firings in progress go on (a shutdown's grace period covers them)."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop

    async def stop(self) -> None:
        """Fire nothing more, and stop the firings in progress (each recorded as interrupted)."""
        await self.halt()
        await self.idle(cancel=True)

    async def idle(self, *, cancel: bool = False) -> None:
        """Wait until the firings in progress have ended (cancelled first, with `cancel`)."""
        while self._firings:
            if cancel:
                for firing in self._firings:
                    firing.cancel()
            await asyncio.gather(*list(self._firings), return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            floor = 0.0
            try:
                await self.tick()
            except Exception:
                log.exception("scheduled tasks: a pass over the due tasks failed; trying again shortly")
                floor = RETRY_AFTER_S
            upcoming = await self._next_due()
            delay = MAX_SLEEP_S if upcoming is None else min(max(upcoming - self.clock(), 0.0), MAX_SLEEP_S)
            delay = max(delay, floor)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def _next_due(self) -> float | None:
        try:
            return await self.store.next_due()
        except Exception:
            log.exception("scheduled tasks: the next due time could not be read")
            return None

    async def tick(self) -> int:
        """Fire every task due by now; the number of firings started. Runs go on in the background
        (see idle()); a task whose due time is past the catch-up window is recorded as missed."""
        now = self.clock()
        started = 0
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
        if not await self.store.claim_firing(task.id, latest, following, now):
            return False
        firing = asyncio.create_task(self._fire(task, latest), name=f"task:{task.id}")
        self._firings.add(firing)
        firing.add_done_callback(self._firings.discard)
        return True

    async def run_now(self, task_id: str) -> None:
        """Fire a live task at once, outside its schedule (its next due time stays as it is)."""
        task = await self.store.get_task(task_id)
        if task is None or task.state not in ("active", "paused"):
            raise TaskError(f"No live task {task_id}.")
        await self._fire(task, self.clock(), record=False)

    async def _fire(self, task: TaskRow, due: float, *, record: bool = True) -> None:
        """One firing: the prompt into the task's own session, a run there, the answer queued with the
        run's end (so a crash after it still delivers it, once) and sent."""
        key = str(cron(task.id))
        route = await self._route(task.deliver_to, task.route)
        status: str = "error"
        run_id: str | None = None
        detail: str | None = None
        try:

            async def plan(run: str, text: str) -> list[OutboxItem]:
                if route is None:
                    return []
                item = Outbound(
                    route, "reply", text, run, session_key=task.deliver_to, dedupe_key=f"task:{run}"
                )
                return await self.delivery.plan(item)

            async def job() -> None:
                nonlocal status, run_id, detail
                session = await self.store.ensure_active_session(key)
                await self.store.add_user_message(session.id, task_prompt(task, due), sender="scheduler")
                result = await self.runner.run(session, channel=TASK_CHANNEL, reply=plan)
                run_id, status = result.run_id, result.status
                detail = None if result.status == "ok" else (result.stop_reason or result.reply)[:500]
                if result.outbox:
                    # Waited for, as a chat's turn waits for its reply: the firing ends once it is sent.
                    await self.delivery.deliver(result.outbox)
                if route is None:
                    detail = f"no chat to deliver to: session '{task.deliver_to}' has never been written in"
                    status = "error"

            await self.lanes.schedule(key, job, merge=False)
        except asyncio.CancelledError:
            if record:
                await asyncio.shield(self._finish(task, due, "interrupted", run_id, "stopped with the bot"))
            raise
        except Exception as exc:
            log.exception("task %s failed", task.id)
            detail = f"{type(exc).__name__}: {exc}"[:500]
        if record:
            await self._finish(task, due, "ok" if status == "ok" else "error", run_id, detail)

    async def _finish(
        self, task: TaskRow, due: float, state: FiringState, run_id: str | None, detail: str | None
    ) -> None:
        pause_after = self.settings.tasks.pause_after_failures
        after = await self.store.finish_firing(
            task.id, due, state, self.clock(), run_id=run_id, detail=detail, pause_after=pause_after
        )
        # Told once: on the failure that paused it, not on later ones of a task resumed meanwhile.
        paused_now = after is not None and after.state == "paused" and after.failures == pause_after
        if state == "error" and paused_now:
            await self._notice(
                task.chat_key,
                task.route,
                f"⚠️ Scheduled task {task.id} failed {pause_after} times in a row and is paused. "
                f"Last error: {detail or 'unknown'}. Cancel it with /tasks cancel {task.id}.",
                f"task-paused:{task.id}:{due}",
            )

    async def _tell_missed(self, task: TaskRow, missed: float, following: float | None) -> None:
        nxt = f"Next run: {when_text(following, task.zone)}." if following else "It will not run again."
        await self._notice(
            task.chat_key,
            task.route,
            f"Scheduled task {task.id} did not run at {when_text(missed, task.zone)}: the bot was down. "
            + nxt,
            f"task-missed:{task.id}:{missed}",
        )

    async def _notice(self, key: str, fallback: str | None, text: str, dedupe: str) -> None:
        route = await self._route(key, fallback)
        if route is None:
            log.warning("task notice for %s has no chat to go to: %s", key, text)
            return
        await self.delivery.send(Outbound(route, "notice", text, session_key=key, dedupe_key=dedupe))

    async def _route(self, key: str, fallback: str | None) -> Route | None:
        session = await self.store.active_session(key)
        return Route.from_json(session.last_route if session and session.last_route else fallback)
