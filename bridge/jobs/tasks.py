"""The runner of scheduled tasks: each due time fired once, in a `cron:<id>` session, acting with the
authority of whoever made the task, and answered through the outbox under the target chat's send
policy. Making, listing and cancelling tasks is the catalogue's (bridge.tasks.catalog)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from bridge.jobs.loop import DueLoop
from bridge.sessions.keys import cron
from bridge.store.sessions import new_id
from bridge.store.tasks import FiringRow, FiringState, TaskRow
from bridge.tasks.catalog import TaskCatalog
from bridge.tasks.when import next_fire, when_text

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

# The channel a task's run is marked with (traces, runs); like an agent's, it has no person behind it.
TASK_CHANNEL = "task"
# Run statuses whose answer was stored and queued with the run's end ("stopped": cut short for going
# in circles, but answered).
ANSWERED = ("ok", "stopped")
# A cron task down for ages is caught up by walking its due times up to now, this many at most.
MAX_WALK = 10_000


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


class TaskService(DueLoop, TaskCatalog):
    """The task catalogue (made, listed and cancelled by the tools, commands and CLI), fired from a
    loop. The tools see it as a TaskCatalog only. DueLoop's __init__ sets all the catalogue reads
    (settings, store, clock, authorities), and its wake() is the one the catalogue calls."""

    name = "tasks"

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
            if await self._claim_missed(task.id, due, following, now, detail):
                await self._tell_missed(task, latest, following)
            return False
        if skipped:
            note = f"{skipped} earlier due time(s) passed while the bot was down; ran the latest"
            if not await self._claim_missed(task.id, due, latest, now, note):
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
                await self._ended(task.id, firing.due_at, "missed", detail)
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
            await self._ended(firing.task_id, firing.due_at, "ok", None)
        else:
            await self._cut_short(firing.task_id, firing.due_at, "by a restart")

    async def _cut_short(self, task_id: str, due: float, why: str) -> None:
        """A firing whose run began and did not end: interrupted, never run again, and told."""
        log.warning("task %s: its firing due %s was cut short %s", task_id, due, why)
        task = await self._ended(task_id, due, "interrupted", f"cut short {why}")
        if task is not None:
            await self._tell(
                task,
                f"⚠️ Scheduled task {task.id} was cut short {why} at {when_text(due, task.zone)} and was "
                f"not finished. {self._next_line(task)}",
                f"task-interrupted:{task.id}:{due}",
            )

    # ------------------------------------------------------------------ each end recorded and counted

    async def _claim_missed(
        self, task_id: str, due: float, following: float | None, now: float, detail: str
    ) -> bool:
        """Record a due time as missed (and move the task on); False when another process took it."""
        claimed = await self.store.claim_firing(task_id, due, following, now, state="missed", detail=detail)
        if claimed and self.metrics is not None:
            self.metrics.task_firing("missed")
        return claimed

    async def _ended(
        self, task_id: str, due: float, state: FiringState, detail: str | None, *, pause_after: int = 0
    ) -> TaskRow | None:
        """Record how a firing ended (see TaskTable.finish_firing), and count it."""
        after = await self.store.finish_firing(
            task_id, due, state, self.clock(), run_id=None, detail=detail, pause_after=pause_after
        )
        if self.metrics is not None:
            self.metrics.task_firing(state)
        return after

    def _next_line(self, task: TaskRow) -> str:
        if task.state in ("active", "paused") and task.next_due is not None:
            return f"Next run: {when_text(task.next_due, task.zone)}."
        return "It will not run again."

    async def _finish(self, task: TaskRow, due: float, state: FiringState, detail: str | None) -> None:
        pause_after = self.settings.tasks.pause_after_failures
        after = await self._ended(task.id, due, state, detail, pause_after=pause_after)
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
