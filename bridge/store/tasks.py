"""Scheduled tasks' tables: the tasks (tasks) and each due time that fired, once (task_firings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bridge.store.engine import Conn, Database

TaskState = Literal["active", "paused", "done", "cancelled"]
# running: claimed, its run in progress (a crash leaves it so; start-up marks it interrupted).
FiringState = Literal["running", "ok", "error", "missed", "interrupted"]
LIVE_STATES: tuple[TaskState, ...] = ("active", "paused")


@dataclass(frozen=True, slots=True)
class TaskRow:
    id: str
    # The session that made the task: its chat is told about misses and pauses, and it counts
    # towards that chat's [tasks] max_per_chat.
    chat_key: str
    # The session whose chat receives each answer, under that chat's send policy.
    deliver_to: str
    prompt: str
    kind: str  # cron | once
    expression: str
    zone: str
    state: TaskState
    created_at: float
    # The next due time (Unix seconds); None once a task has ended.
    next_due: float | None
    failures: int = 0
    last_fired: float | None = None
    # The chat to deliver to, as it was when the task was made (Route JSON): used when the target
    # session has no route of its own yet.
    route: str | None = None
    # When `bridge tasks run-now` asked for a firing outside the schedule (None: not asked).
    run_requested: float | None = None
    # Whom its firings act for: the authority of the run that made it (bridge.sessions.authority,
    # as JSON), and who that was ("telegram:7"); None for tasks made before they were recorded.
    authority: str | None = None
    maker: str | None = None


@dataclass(frozen=True, slots=True)
class FiringRow:
    task_id: str
    due_at: float
    state: FiringState
    started_at: float
    run_id: str | None = None
    ended_at: float | None = None
    detail: str | None = None


_TASK_COLS = (
    "id, chat_key, deliver_to, prompt, kind, expression, zone, state, created_at, next_due, failures, "
    "last_fired, route, run_requested, authority, maker"
)
_FIRING_COLS = "task_id, due_at, state, started_at, run_id, ended_at, detail"


def _task(row: tuple[object, ...]) -> TaskRow:
    (
        id_,
        chat,
        deliver,
        prompt,
        kind,
        expression,
        zone,
        state,
        created,
        due,
        failures,
        fired,
        route,
        asked,
        authority,
        maker,
    ) = row
    return TaskRow(
        str(id_),
        str(chat),
        str(deliver),
        str(prompt),
        str(kind),
        str(expression),
        str(zone),
        state,  # type: ignore[arg-type]
        float(created),  # type: ignore[arg-type]
        None if due is None else float(due),  # type: ignore[arg-type]
        int(failures),  # type: ignore[call-overload]
        None if fired is None else float(fired),  # type: ignore[arg-type]
        None if route is None else str(route),
        None if asked is None else float(asked),  # type: ignore[arg-type]
        None if authority is None else str(authority),
        None if maker is None else str(maker),
    )


def _firing(row: tuple[object, ...]) -> FiringRow:
    task_id, due, state, started, run_id, ended, detail = row
    return FiringRow(
        str(task_id),
        float(due),  # type: ignore[arg-type]
        state,  # type: ignore[arg-type]
        float(started),  # type: ignore[arg-type]
        None if run_id is None else str(run_id),
        None if ended is None else float(ended),  # type: ignore[arg-type]
        None if detail is None else str(detail),
    )


class TaskTable(Database):
    """Tasks and their firings. A firing is claimed by one conditional update of the task's next due
    time: of two workers (or a process and its restart) only one moves it, so each due time fires
    once; the firing's row records what became of it."""

    async def add_task(
        self, task: TaskRow, *, max_per_chat: int, max_per_maker: int | None = None
    ) -> Literal["added", "chat_full", "maker_full"]:
        """Store a new task unless its chat already holds `max_per_chat` live ones, or (where
        `max_per_maker` is given) its maker `max_per_maker` live ones in that chat. Counted and added
        in one transaction, so a burst of requests cannot pass the caps together."""

        def add(conn: Conn) -> Literal["added", "chat_full", "maker_full"]:
            held = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(CASE WHEN maker = ? THEN 1 ELSE 0 END), 0) FROM tasks "
                "WHERE chat_key = ? AND state IN ('active', 'paused')",
                (task.maker, task.chat_key),
            ).fetchone()
            in_chat, by_maker = (int(held[0]), int(held[1])) if held is not None else (0, 0)
            if in_chat >= max_per_chat:
                return "chat_full"
            if max_per_maker is not None and by_maker >= max_per_maker:
                return "maker_full"
            conn.execute(
                f"INSERT INTO tasks ({_TASK_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    task.id,
                    task.chat_key,
                    task.deliver_to,
                    task.prompt,
                    task.kind,
                    task.expression,
                    task.zone,
                    task.state,
                    task.created_at,
                    task.next_due,
                    task.failures,
                    task.last_fired,
                    task.route,
                    task.run_requested,
                    task.authority,
                    task.maker,
                ),
            )
            return "added"

        return await self._write(add)

    async def get_task(self, task_id: str) -> TaskRow | None:
        rows = await self._rows(f"SELECT {_TASK_COLS} FROM tasks WHERE id = ?", (task_id,))
        return _task(rows[0]) if rows else None

    async def list_tasks(self, chat_key: str | None = None, *, live_only: bool = True) -> list[TaskRow]:
        """Tasks, soonest due first: one chat's (made there or delivered there), or all."""
        where, params = [], []
        if chat_key is not None:
            where.append("(chat_key = ? OR deliver_to = ?)")
            params += [chat_key, chat_key]
        if live_only:
            where.append("state IN ('active', 'paused')")
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self._rows(
            f"SELECT {_TASK_COLS} FROM tasks {clause}ORDER BY next_due IS NULL, next_due, created_at",
            params,
        )
        return [_task(row) for row in rows]

    async def due_tasks(self, now: float, limit: int = 100) -> list[TaskRow]:
        rows = await self._rows(
            f"SELECT {_TASK_COLS} FROM tasks WHERE state = 'active' AND next_due <= ? "
            "ORDER BY next_due LIMIT ?",
            (now, limit),
        )
        return [_task(row) for row in rows]

    async def next_due(self) -> float | None:
        """The soonest due time of any active task (a run asked for by `bridge tasks run-now` is due
        at once)."""
        rows = await self._rows(
            "SELECT MIN(CASE WHEN state = 'active' THEN next_due END), MIN(run_requested) FROM tasks "
            "WHERE state IN ('active', 'paused')"
        )
        times = [float(t) for t in (rows[0] if rows else ()) if t is not None]
        return min(times) if times else None

    async def request_run(self, task_id: str, now: float) -> TaskRow | None:
        """Ask the running bot to fire a live task now (`bridge tasks run-now`); None when not live."""

        def ask(conn: Conn) -> TaskRow | None:
            row = conn.execute(
                f"UPDATE tasks SET run_requested = ? WHERE id = ? AND state IN ('active', 'paused') "
                f"RETURNING {_TASK_COLS}",
                (now, task_id),
            ).fetchone()
            return _task(row) if row is not None else None

        return await self._write(ask)

    async def requested_runs(self, limit: int = 100) -> list[TaskRow]:
        rows = await self._rows(
            f"SELECT {_TASK_COLS} FROM tasks WHERE run_requested IS NOT NULL "
            "AND state IN ('active', 'paused') ORDER BY run_requested LIMIT ?",
            (limit,),
        )
        return [_task(row) for row in rows]

    async def claim_requested_run(self, task_id: str, requested: float, run_id: str, now: float) -> bool:
        """Take a run asked for at `requested` (its firing is recorded as due then); False when another
        process took it first. The schedule stays as it was."""

        def claim(conn: Conn) -> bool:
            moved = conn.execute(
                "UPDATE tasks SET run_requested = NULL, last_fired = ? WHERE id = ? AND run_requested = ?",
                (now, task_id, requested),
            )
            if moved.rowcount != 1:
                return False
            conn.execute(
                f"INSERT INTO task_firings ({_FIRING_COLS}) VALUES (?, ?, 'running', ?, ?, NULL, ?) "
                "ON CONFLICT DO NOTHING",
                (task_id, requested, now, run_id, "run now"),
            )
            return True

        return await self._write(claim)

    async def end_task(self, task_id: str, state: TaskState) -> TaskRow | None:
        """Cancel or pause a live task (or resume a paused one as 'active'); None when it isn't live."""

        def end(conn: Conn) -> TaskRow | None:
            # A cancelled task has no next run; a paused one keeps its place, for a resume.
            row = conn.execute(
                "UPDATE tasks SET state = ?, next_due = CASE WHEN ? = 'cancelled' THEN NULL ELSE next_due "
                f"END WHERE id = ? AND state IN ('active', 'paused') RETURNING {_TASK_COLS}",
                (state, state, task_id),
            ).fetchone()
            return _task(row) if row is not None else None

        return await self._write(end)

    async def resume_task(self, task_id: str, next_due: float) -> TaskRow | None:
        """Make a paused task active again, due next at `next_due`, its failures forgotten (else the
        next one would pause it again at once); None when it isn't paused."""

        def resume(conn: Conn) -> TaskRow | None:
            row = conn.execute(
                "UPDATE tasks SET state = 'active', next_due = ?, failures = 0 "
                f"WHERE id = ? AND state = 'paused' RETURNING {_TASK_COLS}",
                (next_due, task_id),
            ).fetchone()
            return _task(row) if row is not None else None

        return await self._write(resume)

    async def claim_firing(
        self,
        task_id: str,
        due: float,
        following: float | None,
        now: float,
        *,
        state: FiringState = "running",
        detail: str | None = None,
        run_id: str | None = None,
    ) -> bool:
        """Take the firing of `task_id` at `due` and move the task on to `following` (None ends it, as
        a one-shot task ends once fired). False when someone else took it first. `run_id`: the run
        that will answer it, so a start after a crash can tell whether it ended."""

        def claim(conn: Conn) -> bool:
            moved = conn.execute(
                "UPDATE tasks SET next_due = ?, last_fired = ?, "
                "state = CASE WHEN ? THEN 'done' ELSE state END "
                "WHERE id = ? AND state = 'active' AND next_due = ?",
                (following, now, following is None, task_id, due),
            )
            if moved.rowcount != 1:
                return False
            ended = None if state == "running" else now
            conn.execute(
                f"INSERT INTO task_firings ({_FIRING_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (task_id, due, state, now, run_id, ended, detail),
            )
            return True

        return await self._write(claim)

    async def finish_firing(
        self,
        task_id: str,
        due: float,
        state: FiringState,
        now: float,
        *,
        run_id: str | None,
        detail: str | None,
        pause_after: int,
    ) -> TaskRow | None:
        """Record how a firing ended; a failure counts towards pausing the task, a success resets the
        count (a firing a crash cut short does neither: no fault of the task's). The task as it is
        now (paused where this failure was one too many)."""

        def finish(conn: Conn) -> TaskRow | None:
            conn.execute(
                "UPDATE task_firings SET state = ?, ended_at = ?, run_id = COALESCE(?, run_id), "
                "detail = COALESCE(?, detail) "
                "WHERE task_id = ? AND due_at = ?",
                (state, now, run_id, detail, task_id, due),
            )
            if state == "ok":
                conn.execute("UPDATE tasks SET failures = 0 WHERE id = ?", (task_id,))
            elif state == "error":
                conn.execute(
                    "UPDATE tasks SET failures = failures + 1, "
                    "state = CASE WHEN state = 'active' AND failures + 1 >= ? THEN 'paused' ELSE state END "
                    "WHERE id = ?",
                    (pause_after, task_id),
                )
            row = conn.execute(f"SELECT {_TASK_COLS} FROM tasks WHERE id = ?", (task_id,)).fetchone()
            return _task(row) if row is not None else None

        return await self._write(finish)

    async def running_firings(self) -> list[FiringRow]:
        """Firings whose run began and has not been recorded as ended: at a start on a database no
        other process uses, the ones a crash cut short."""
        rows = await self._rows(f"SELECT {_FIRING_COLS} FROM task_firings WHERE state = 'running'")
        return [_firing(row) for row in rows]

    async def firings(self, task_id: str, limit: int = 20) -> list[FiringRow]:
        """A task's firings, newest first."""
        rows = await self._rows(
            f"SELECT {_FIRING_COLS} FROM task_firings WHERE task_id = ? ORDER BY due_at DESC LIMIT ?",
            (task_id, limit),
        )
        return [_firing(row) for row in rows]
