"""Runs and summaries: a turn's record, what it starts from, its compaction, and what a crash cut short."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection
from dataclasses import dataclass

from bridge.store.base import (
    CompactionInput,
    InterruptedNotices,
    NewSummary,
    OutboxItem,
    RunContext,
    RunRow,
    SessionRow,
    StartedRun,
    SummaryRow,
    Unanswered,
)
from bridge.store.cache import ActiveSessions
from bridge.store.engine import Conn, Engine, of_workers
from bridge.store.messages import (
    LOADS_SQL,
    MEMORIES_SQL,
    MessageTable,
    history_rows,
    insert_message,
    loaded_of,
    memories_of,
    query_history,
    select_history,
    since_rows,
    since_sql,
)
from bridge.store.outbox import insert_outbox
from bridge.store.sessions import SESSION_COLS, new_id
from bridge.store.window import Window, Windows, holds_after, topped_up
from bridge.text import scrub

_RUN_COLS = (
    "id, session_id, status, started_at, channel, input_hash, ended_at, iterations, prompt_tokens, "
    "completion_tokens, error, input_upto, kind, parent_run_id"
)
_SUMMARY_COLS = "id, session_id, run_id, upto, content, turns, replaced_chars, created_at"
_LATEST_SUMMARY_SQL = f"SELECT {_SUMMARY_COLS} FROM summaries WHERE session_id = ? ORDER BY id DESC LIMIT 1"
_ANSWERED_SQL = "SELECT MAX(input_upto) FROM runs WHERE session_id = ?"


class RunTable(MessageTable):
    """Runs (a turn's, or a compaction's) and the summaries compaction writes."""

    def __init__(self, engine: Engine, *, sessions: ActiveSessions | None = None) -> None:
        super().__init__(engine, sessions=sessions)
        # The history windows of recent sessions, topped up each turn rather than read again, by
        # a column in commit order (window.py says why).
        self._windows = Windows()
        self._order = BY_ID if engine.ids_in_commit_order else BY_SEQUENCE

    def _message_changed(self, session_id: str, message_id: int, content: str, media: str | None) -> None:
        self._windows.replace(session_id, message_id, scrub(content), media)

    async def begin_run(
        self,
        run_id: str,
        session_id: str,
        channel: str | None,
        *,
        memory_scope: str,
        history_limit: int,
        memory_limit: int,
        upto: int | None = None,
        force: bool = False,
        parent_run_id: str | None = None,
    ) -> StartedRun:
        def claim(conn: Conn) -> tuple[int, str] | None:
            """The newest user message (up to `upto`), unless an earlier run took it up; the run
            row claims it. Small indexed reads only: this runs on the writer (see below)."""
            bound, params = (" AND id <= ?", (upto,)) if upto is not None else ("", ())
            # How far runs answered, in the same statement: one round trip, not two.
            newest = conn.execute(
                f"SELECT id, content, ({_ANSWERED_SQL}) FROM messages WHERE session_id = ? "
                f"AND kind = 'user'{bound} ORDER BY id DESC LIMIT 1",
                (session_id, session_id, *params),
            ).fetchone()
            if newest is None or (not force and newest[0] <= (newest[2] or 0)):
                return None
            input_hash = hashlib.sha256(newest[1].encode()).hexdigest()
            conn.execute(
                "INSERT INTO runs (id, session_id, status, channel, input_hash, input_upto, started_at, "
                "worker_id, parent_run_id) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    session_id,
                    channel,
                    input_hash,
                    newest[0],
                    time.time(),
                    self.worker_id,
                    parent_run_id,
                ),
            )
            take_up(conn, session_id, newest[0])
            return newest[0], input_hash

        claimed = await self._write(claim)
        if claimed is None:
            return StartedRun(RunContext([], set(), []), [], None)
        answered, input_hash = claimed
        # The window is read beside the writer, not on it: it is most of a turn's reading, and the
        # writer is the one thread every chat's writes queue for. Read after the claim committed,
        # it holds the claimed message; later messages (arrived meanwhile) wait for the next run.
        context = await self.run_context(session_id, memory_scope, history_limit, memory_limit)
        rows = [r for r in context.rows if r.kind != "user" or r.id <= answered]
        answers = next((r for r in reversed(rows) if r.kind == "user"), None)
        assert answers is not None and answers.id == answered, "the claimed message is in the window"
        return StartedRun(context, rows, answers, input_hash)

    async def run_context(
        self, session_id: str, memory_scope: str, history_limit: int, memory_limit: int
    ) -> RunContext:
        """Everything a run starts from in one trip to the database thread: the history window is the
        one the session's last run read, topped up with the rows written since, where it is kept."""
        windows, order = self._windows, self._order
        kept = windows.get(session_id)
        context, window = await self._read(
            lambda conn: _read_context(
                conn, order, session_id, memory_scope, history_limit, memory_limit, kept
            ),
            snapshot=True,
            # Indexed, and at most a window's rows: cheaper on the loop than a trip to a thread.
            quick=True,
        )
        windows.put(session_id, window)
        return context

    # ---------------------------------------------------------------- compaction

    async def compaction_input(self, session_id: str, max_rows: int) -> CompactionInput:
        def read(conn: Conn) -> CompactionInput:
            summary = _latest_summary(conn, session_id)
            rows = select_history(conn, session_id, max_rows, False, after=summary.upto if summary else 0)
            finished = conn.execute(
                "SELECT MAX(input_upto) FROM runs WHERE session_id = ? AND status != 'running'",
                (session_id,),
            ).fetchone()[0]
            return CompactionInput(summary, rows, int(finished or 0))

        return await self._read(read, snapshot=True)

    async def record_compaction(
        self,
        run_id: str,
        session_id: str,
        *,
        started_at: float,
        status: str,
        error: str | None,
        trace: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        summary: NewSummary | None,
    ) -> SummaryRow | None:
        def write(conn: Conn) -> SummaryRow | None:
            # Written only when done: a compaction a crash cuts short leaves nothing to abort or announce.
            conn.execute(
                "INSERT INTO runs (id, session_id, status, kind, started_at, ended_at, iterations, "
                "prompt_tokens, completion_tokens, error, trace) "
                "VALUES (?, ?, ?, 'compaction', ?, ?, 1, ?, ?, ?, ?)",
                (
                    run_id,
                    session_id,
                    status,
                    started_at,
                    time.time(),
                    prompt_tokens,
                    completion_tokens,
                    *_scrubbed(error, trace),
                ),
            )
            if summary is None:
                return None
            latest = _latest_summary(conn, session_id)
            if latest is not None and latest.upto >= summary.upto:
                return None
            conn.execute(
                "INSERT INTO summaries (session_id, run_id, upto, content, turns, replaced_chars, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    run_id,
                    summary.upto,
                    scrub(summary.content),
                    summary.turns,
                    summary.replaced_chars,
                    time.time(),
                ),
            )
            return _latest_summary(conn, session_id)

        return await self._write(write)

    async def summaries(self, session_id: str) -> list[SummaryRow]:
        rows = await self._rows(
            f"SELECT {_SUMMARY_COLS} FROM summaries WHERE session_id = ? ORDER BY id", (session_id,)
        )
        return [SummaryRow(*row) for row in rows]

    # ---------------------------------------------------------------- runs

    async def start_run(
        self,
        run_id: str,
        session_id: str,
        channel: str | None,
        input_hash: str,
        input_upto: int | None = None,
    ) -> None:
        await self._write(
            lambda conn: conn.execute(
                "INSERT INTO runs (id, session_id, status, channel, input_hash, input_upto, started_at) "
                "VALUES (?, ?, 'running', ?, ?, ?, ?)",
                (run_id, session_id, channel, input_hash, input_upto, time.time()),
            )
        )

    async def finish_run(
        self,
        run_id: str,
        status: str,
        *,
        iterations: int = 0,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        error: str | None = None,
        trace: str | None = None,
        reply: tuple[str, str] | None = None,
        outbox: Collection[OutboxItem] = (),
    ) -> list[int]:
        def finish(conn: Conn) -> list[int]:
            if reply is not None:
                # The answer, the run's status and the reply's delivery rows together: a crash leaves
                # all of them or none, never an answer that nobody will send.
                insert_message(conn, reply[0], "assistant", reply[1], run_id=run_id)
            conn.execute(
                "UPDATE runs SET status = ?, ended_at = ?, iterations = ?, prompt_tokens = ?, "
                "completion_tokens = ?, error = ?, trace = ? WHERE id = ?",
                (
                    status,
                    time.time(),
                    iterations,
                    prompt_tokens,
                    completion_tokens,
                    *_scrubbed(error, trace),
                    run_id,
                ),
            )
            return insert_outbox(conn, outbox)

        if reply is None:
            return await self._write(finish)
        return await self._add(reply[0], finish)

    async def get_trace(self, run_id: str) -> str | None:
        trace = await self._scalar("SELECT trace FROM runs WHERE id = ?", (run_id,))
        return trace if isinstance(trace, str) else None

    async def prune_traces(self, keep: int) -> int:
        """Drop the traces of all but the newest `keep` runs; the run rows stay."""
        cursor = await self._write(
            lambda conn: conn.execute(
                "UPDATE runs SET trace = NULL WHERE trace IS NOT NULL AND id NOT IN "
                "(SELECT id FROM runs WHERE trace IS NOT NULL ORDER BY started_at DESC LIMIT ?)",
                (keep,),
            ),
            slow=True,
        )
        return cursor.rowcount

    async def list_runs(self, *, session_key: str | None, limit: int) -> list[tuple[RunRow, str]]:
        """Newest runs first, each with its session's key."""
        where, params = ("WHERE s.key = ?", [session_key]) if session_key else ("", [])
        columns = ", ".join("r." + c.strip() for c in _RUN_COLS.split(","))
        rows = await self._rows(
            f"SELECT {columns}, s.key FROM runs r JOIN sessions s ON s.id = r.session_id {where} "
            "ORDER BY r.started_at DESC LIMIT ?",
            (*params, limit),
        )
        return [(RunRow(*row[:-1]), row[-1]) for row in rows]

    async def abort_interrupted_runs(
        self, notices: InterruptedNotices | None = None, *, workers: Collection[str | None] | None = None
    ) -> list[RunRow]:
        """Runs a crash left 'running' become 'aborted' (all, or those of the given dead workers), and
        the notices `notices` builds for them are queued in the same transaction; the runs are
        returned. One UPDATE ... RETURNING: two workers aborting at once abort each run once."""
        where, params = of_workers("worker_id", workers) if workers is not None else ("1 = 1", ())

        def abort(conn: Conn) -> list[RunRow]:
            runs = sorted(
                (
                    RunRow(*row)
                    for row in conn.execute(
                        "UPDATE runs SET status = 'aborted', ended_at = ?, error = 'interrupted: "
                        "Bridge stopped during this run' WHERE status = 'running' AND "
                        f"{where} RETURNING {_RUN_COLS}",
                        (time.time(), *params),
                    ).fetchall()
                ),
                key=lambda run: run.started_at,
            )
            if not runs:
                return runs
            if notices is None:
                return runs
            for run in runs:
                found = conn.execute(
                    f"SELECT {SESSION_COLS} FROM sessions WHERE id = ?", (run.session_id,)
                ).fetchone()
                asked = conn.execute(
                    "SELECT content FROM messages WHERE id = ? AND session_id = ?",
                    (run.input_upto, run.session_id),
                ).fetchone()
                insert_outbox(conn, notices(run, SessionRow(*found) if found else None, asked and asked[0]))
            return runs

        return await self._write(abort)

    async def unanswered(self, upto: int | None = None) -> list[Unanswered]:
        """Active sessions whose newest user message no run took up; `upto`: only messages up to
        that id (those stored before this process began: later ones are the live traffic's)."""
        rows = await self._rows(
            f"SELECT {', '.join('s.' + c.strip() for c in SESSION_COLS.split(','))}, m.id, "
            "m.platform_msg_id FROM sessions s JOIN messages m ON m.id = (SELECT MAX(id) FROM messages "
            "WHERE session_id = s.id AND kind = 'user' AND via_session IS NULL) "
            "WHERE s.ended_at IS NULL AND m.id > COALESCE((SELECT MAX(input_upto) FROM runs "
            "WHERE session_id = s.id), 0) AND m.id <= ? ORDER BY m.id",
            (upto if upto is not None else 2**62,),
        )
        return [Unanswered(SessionRow(*row[:-2]), row[-2], row[-1]) for row in rows]

    async def last_message_id(self) -> int:
        """The newest message's id (0 for none)."""
        return int(await self._scalar("SELECT COALESCE(MAX(id), 0) FROM messages") or 0)

    async def skip_unanswered(self, session_id: str, reason: str) -> bool:
        def skip(conn: Conn) -> bool:
            newest = conn.execute(
                "SELECT MAX(id) FROM messages WHERE session_id = ? AND kind = 'user'", (session_id,)
            ).fetchone()[0]
            if newest is None or newest <= _answered_upto(conn, session_id):
                return False
            now = time.time()
            conn.execute(
                "INSERT INTO runs (id, session_id, status, input_upto, started_at, ended_at, error) "
                "VALUES (?, ?, 'cancelled', ?, ?, ?, ?)",
                (new_id(), session_id, newest, now, now, reason),
            )
            take_up(conn, session_id, newest)
            return True

        return await self._write(skip)

    async def get_run(self, run_id: str) -> RunRow | None:
        rows = await self._rows(f"SELECT {_RUN_COLS} FROM runs WHERE id = ?", (run_id,))
        return RunRow(*rows[0]) if rows else None

    async def child_runs(self, run_id: str) -> list[RunRow]:
        """The sub-agents' runs that run started (spawn_agent), oldest first."""
        rows = await self._rows(
            f"SELECT {_RUN_COLS} FROM runs WHERE parent_run_id = ? ORDER BY started_at", (run_id,)
        )
        return [RunRow(*row) for row in rows]


@dataclass(frozen=True, slots=True)
class Order:
    """How a kept window finds the rows written since it was read: a messages column in commit
    order within a session, and how far a session goes by it."""

    column: str
    # The session's newest mark by `column` (one parameter: the session's id).
    newest_sql: str
    # Whether the rows a top-up reads say how far it went (their newest id); a sequence number is
    # not among a row's columns, so the session is asked.
    rows_say_how_far: bool


# SQLite: ids, as its writes are serialized.
BY_ID = Order("id", "SELECT MAX(id) FROM messages WHERE session_id = ?", rows_say_how_far=True)
# PostgreSQL: the session's message sequence, taken under its row lock (postgres/migrations.py, 21).
BY_SEQUENCE = Order("seq", "SELECT message_seq FROM sessions WHERE id = ?", rows_say_how_far=False)


def _read_context(
    conn: Conn,
    order: Order,
    session_id: str,
    memory_scope: str,
    history_limit: int,
    memory_limit: int,
    kept: Window | None = None,
) -> tuple[RunContext, Window]:
    if kept is None:
        return _whole_context(conn, order, session_id, memory_scope, history_limit, memory_limit)
    summary = conn.execute(_LATEST_SUMMARY_SQL, (session_id,))
    newest = None if order.rows_say_how_far else conn.execute(order.newest_sql, (session_id,))
    new = conn.execute(*since_sql(session_id, kept.last, order.column))
    memories = conn.execute(MEMORIES_SQL, (memory_scope, memory_limit)) if memory_limit else None
    answered = conn.execute(_ANSWERED_SQL, (session_id,))
    found = summary.fetchone()
    latest = SummaryRow(*found) if found else None
    if kept.limit != history_limit or not holds_after(kept, latest):
        # With another limit, or after a compaction the window cannot cover: the whole window again.
        return _whole_context(conn, order, session_id, memory_scope, history_limit, memory_limit)
    rows = since_rows(new)
    by_rows = rows[-1].id if rows else kept.last
    last = int(newest.fetchone()[0] or 0) if newest is not None else by_rows
    window = topped_up(kept, rows, latest.upto if latest else 0, last, latest.id if latest else None)
    remembered = memories_of(memories.fetchall()) if memories is not None else []
    return _context(window, remembered, int(answered.fetchone()[0] or 0), latest), window


def _whole_context(
    conn: Conn, order: Order, session_id: str, memory_scope: str, history_limit: int, memory_limit: int
) -> tuple[RunContext, Window]:
    """A first read, or one after a compaction: the whole window, and how far the session goes.
    Every statement is sent before any result is read, none needing another's result, so in
    PostgreSQL's pipeline mode (its snapshot reads) they go in one round trip."""
    summary = conn.execute(_LATEST_SUMMARY_SQL, (session_id,))
    newest = conn.execute(order.newest_sql, (session_id,))
    loads = conn.execute(LOADS_SQL, (session_id,))
    history = query_history(conn, session_id, history_limit, False, after=None)
    memories = conn.execute(MEMORIES_SQL, (memory_scope, memory_limit)) if memory_limit else None
    answered = conn.execute(_ANSWERED_SQL, (session_id,))
    found = summary.fetchone()
    latest = SummaryRow(*found) if found else None
    loaded = loaded_of(loads.fetchall())
    window = Window(
        tuple(history_rows(history)),
        int(newest.fetchone()[0] or 0),
        loaded.groups,
        latest.id if latest else None,
        history_limit,
        loaded.skills,
    )
    remembered = memories_of(memories.fetchall()) if memories is not None else []
    return _context(window, remembered, int(answered.fetchone()[0] or 0), latest), window


def _context(
    window: Window, memories: list[str], answered_upto: int, summary: SummaryRow | None
) -> RunContext:
    return RunContext(
        list(window.rows),
        set(window.loaded_groups),
        memories,
        answered_upto,
        summary,
        set(window.loaded_skills),
    )


def _scrubbed(*texts: str | None) -> list[str | None]:
    return [None if text is None else scrub(text) for text in texts]


def take_up(conn: Conn, session_id: str, upto: int) -> None:
    """The session's messages up to `upto` are taken up by a run: they leave the intake queue."""
    conn.execute("DELETE FROM intake WHERE session_id = ? AND message_id <= ?", (session_id, upto))


def _answered_upto(conn: Conn, session_id: str) -> int:
    row = conn.execute(_ANSWERED_SQL, (session_id,)).fetchone()
    return int(row[0] or 0)


def _latest_summary(conn: Conn, session_id: str) -> SummaryRow | None:
    row = conn.execute(_LATEST_SUMMARY_SQL, (session_id,)).fetchone()
    return SummaryRow(*row) if row else None
