"""The SQLite store: sessions, messages, runs and memories, on the outbox table and SQLiteConnection."""

from __future__ import annotations

import dataclasses
import json
import random
import sqlite3
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from bridge.store.base import (
    CompactionInput,
    InterruptedNotices,
    MessageRow,
    NewSummary,
    OutboxItem,
    RunContext,
    RunRow,
    SessionMeta,
    SessionRow,
    SessionSummary,
    SummaryRow,
    ToolExchange,
    Unanswered,
)
from bridge.store.cache import ActiveSessions
from bridge.store.connection import T, Work
from bridge.store.outbox import OutboxTable, insert_outbox
from bridge.text import scrub

_SESSION_COLS = (
    "id, key, created_at, updated_at, ended_at, surface, chat_type, display_name, send_policy, last_route, "
    "parent_id, model_profile"
)
_MESSAGE_COLS = (
    "id, session_id, kind, content, created_at, run_id, step, tool_name, tool_call_id, tool_input, "
    "tool_status, sender, via_session"
)
_RUN_COLS = (
    "id, session_id, status, started_at, channel, input_hash, ended_at, iterations, prompt_tokens, "
    "completion_tokens, error, input_upto, kind"
)
_SUMMARY_COLS = "id, session_id, run_id, upto, content, turns, replaced_chars, created_at"


# The session columns an inbound message describes (SessionMeta's fields, same names as columns).
_META_FIELDS = tuple(f.name for f in dataclasses.fields(SessionMeta))


_ids = random.Random()  # seeded from os.urandom, once


def new_id() -> str:
    """A 16-hex-digit id for a session or run. Ids name rows, they guard nothing, so they come from a
    generator seeded once from the OS: a fresh os.urandom call took ~0.1 ms on a VM, once per turn."""
    return f"{_ids.getrandbits(64):016x}"


class SQLiteStore(OutboxTable):
    """Store on one aiosqlite connection: sessions, messages, runs, the outbox and memories."""

    def __init__(self, path: Path | str, *, sessions: ActiveSessions | None = None) -> None:
        super().__init__(path)
        self._active = sessions or ActiveSessions()

    # ---------------------------------------------------------------- sessions

    async def active_session(self, key: str) -> SessionRow | None:
        cached = self._active.get(key)
        if cached is not None:
            return cached
        rows = await self._rows(
            f"SELECT {_SESSION_COLS} FROM sessions WHERE key = ? AND ended_at IS NULL", (key,)
        )
        if not rows:
            return None
        row = SessionRow(*rows[0])
        self._active.put(row)
        return row

    async def ensure_active_session(self, key: str, meta: SessionMeta | None = None) -> SessionRow:
        found = await self.active_session(key)
        if found is not None:
            if meta is not None and _meta_differs(found, meta):
                return await self._update_meta(found, meta)
            return found
        row = await self._write(lambda conn: _insert_session(conn, key, meta))
        self._active.put(row)
        return row

    async def start_new_session(self, key: str, meta: SessionMeta | None = None) -> SessionRow:
        previous = await self.active_session(key)
        if meta is None and previous is not None:
            meta = SessionMeta(**{name: getattr(previous, name) for name in _META_FIELDS})

        def replace(conn: sqlite3.Connection) -> SessionRow:
            conn.execute(
                "UPDATE sessions SET ended_at = ? WHERE key = ? AND ended_at IS NULL", (time.time(), key)
            )
            row = _insert_session(conn, key, meta)
            if previous is not None and previous.send_policy is not None:
                # The operator's /send choice is about the chat, not the conversation: /clear keeps it.
                conn.execute(
                    "UPDATE sessions SET send_policy = ? WHERE id = ?", (previous.send_policy, row.id)
                )
                row = dataclasses.replace(row, send_policy=previous.send_policy)
            if previous is not None and previous.model_profile is not None:
                # So is the /model choice: a fresh conversation on the model the owner picked here.
                conn.execute(
                    "UPDATE sessions SET model_profile = ? WHERE id = ?", (previous.model_profile, row.id)
                )
                row = dataclasses.replace(row, model_profile=previous.model_profile)
            return row

        row = await self._write(replace)
        self._active.put(row)
        return row

    async def _update_meta(self, session: SessionRow, meta: SessionMeta) -> SessionRow:
        merged = {name: getattr(meta, name) or getattr(session, name) for name in _META_FIELDS}
        await self._write(
            lambda conn: conn.execute(
                f"UPDATE sessions SET {', '.join(f'{name} = ?' for name in merged)} WHERE id = ?",
                (*merged.values(), session.id),
            )
        )
        found = await self.get_session(session.id)
        assert found is not None
        self._active.put(found)
        return found

    async def get_session(self, session_id: str) -> SessionRow | None:
        rows = await self._rows(f"SELECT {_SESSION_COLS} FROM sessions WHERE id = ?", (session_id,))
        return SessionRow(*rows[0]) if rows else None

    async def list_sessions(
        self, *, limit: int, active_since: float | None = None, active_only: bool = True
    ) -> list[SessionSummary]:
        where, params = ["1 = 1"], []
        if active_only:
            where.append("s.ended_at IS NULL")
        if active_since is not None:
            where.append("s.updated_at >= ?")
            params.append(active_since)
        rows = await self._rows(
            f"SELECT {', '.join('s.' + c.strip() for c in _SESSION_COLS.split(','))}, "
            "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) "
            f"FROM sessions s WHERE {' AND '.join(where)} ORDER BY s.updated_at DESC LIMIT ?",
            (*params, limit),
        )
        return [SessionSummary(SessionRow(*row[:-1]), row[-1]) for row in rows]

    async def set_send_policy(self, session_id: str, value: str | None) -> None:
        await self._write(
            lambda conn: conn.execute("UPDATE sessions SET send_policy = ? WHERE id = ?", (value, session_id))
        )
        self._active.update(session_id, send_policy=value)

    async def set_model_profile(self, session_id: str, name: str | None) -> None:
        await self._write(
            lambda conn: conn.execute(
                "UPDATE sessions SET model_profile = ? WHERE id = ?", (name, session_id)
            )
        )
        self._active.update(session_id, model_profile=name)

    # ---------------------------------------------------------------- messages

    async def add_user_message(
        self,
        session_id: str,
        content: str,
        *,
        sender: str | None = None,
        platform_msg_id: str | None = None,
        via_session: str | None = None,
    ) -> int | None:
        """Store a user message; None when the platform message id was stored before (a redelivery)."""
        try:
            return await self._add(
                session_id,
                lambda conn: _insert_message(
                    conn,
                    session_id,
                    "user",
                    content,
                    sender=sender,
                    platform_msg_id=platform_msg_id,
                    via_session=via_session,
                ),
            )
        except sqlite3.IntegrityError as exc:
            if platform_msg_id is not None and "platform_msg_id" in str(exc):
                return None
            raise

    async def add_assistant_message(self, session_id: str, run_id: str | None, content: str) -> int:
        return await self._add(
            session_id, lambda conn: _insert_message(conn, session_id, "assistant", content, run_id=run_id)
        )

    async def add_tool_exchange(self, session_id: str, run_id: str, exchange: ToolExchange) -> None:
        common = {"run_id": run_id, "step": exchange.step, "tool_name": exchange.tool_name}

        def both(conn: sqlite3.Connection) -> None:
            _insert_message(
                conn,
                session_id,
                "tool_call",
                exchange.preamble,
                tool_call_id=exchange.call_id,
                tool_input=exchange.tool_input,
                tool_status=exchange.status,
                **common,
            )
            _insert_message(
                conn,
                session_id,
                "tool_result",
                exchange.result,
                tool_call_id=exchange.call_id,
                tool_status=exchange.status,
                **common,
            )

        # Call and result in one transaction: history never holds one without the other.
        await self._add(session_id, both)

    async def _add(self, session_id: str, work: Work[T]) -> T:
        """A write that adds messages to a session, which also moves its updated_at."""
        result = await self._write(work)
        self._active.update(session_id, updated_at=time.time())
        return result

    async def history(self, session_id: str, limit: int, *, chat_only: bool = False) -> list[MessageRow]:
        return await self._read(lambda conn: _history(conn, session_id, limit, chat_only))

    async def count_messages(self, session_id: str) -> int:
        return int(await self._scalar("SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)))

    async def search_messages(self, session_id: str, query: str, limit: int) -> list[MessageRow]:
        pattern = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = await self._rows(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE session_id = ? AND kind IN ('user', 'assistant') "
            "AND content LIKE ? ESCAPE '\\' ORDER BY id DESC LIMIT ?",
            (session_id, pattern, limit),
        )
        return [MessageRow(*row) for row in rows]

    async def loaded_groups(self, session_id: str) -> set[str]:
        """Groups loaded anywhere in the session's history: one query on a partial index."""
        return await self._read(lambda conn: _loaded_groups(conn, session_id))

    async def run_context(
        self, session_id: str, memory_scope: str, history_limit: int, memory_limit: int
    ) -> RunContext:
        """Everything a run starts from in one trip to the database thread."""

        def read(conn: sqlite3.Connection) -> RunContext:
            summary = _latest_summary(conn, session_id)
            return RunContext(
                _history(conn, session_id, history_limit, False, after=summary.upto if summary else 0),
                _loaded_groups(conn, session_id),
                _memories(conn, memory_scope, memory_limit) if memory_limit else [],
                _answered_upto(conn, session_id),
                summary,
            )

        return await self._read(read, snapshot=True)

    # ---------------------------------------------------------------- compaction

    async def compaction_input(self, session_id: str, max_rows: int) -> CompactionInput:
        def read(conn: sqlite3.Connection) -> CompactionInput:
            summary = _latest_summary(conn, session_id)
            rows = _history(conn, session_id, max_rows, False, after=summary.upto if summary else 0)
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
        def write(conn: sqlite3.Connection) -> SummaryRow | None:
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
            cursor = conn.execute(
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
            return _latest_summary(conn, session_id) if cursor.lastrowid else None

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
        def finish(conn: sqlite3.Connection) -> list[int]:
            if reply is not None:
                # The answer, the run's status and the reply's delivery rows together: a crash leaves
                # all of them or none, never an answer that nobody will send.
                _insert_message(conn, reply[0], "assistant", reply[1], run_id=run_id)
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
        return await self._scalar("SELECT trace FROM runs WHERE id = ?", (run_id,))

    async def prune_traces(self, keep: int) -> int:
        """Drop the traces of all but the newest `keep` runs; the run rows stay."""
        cursor = await self._write(
            lambda conn: conn.execute(
                "UPDATE runs SET trace = NULL WHERE trace IS NOT NULL AND id NOT IN "
                "(SELECT id FROM runs WHERE trace IS NOT NULL ORDER BY started_at DESC LIMIT ?)",
                (keep,),
            )
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

    async def abort_interrupted_runs(self, notices: InterruptedNotices | None = None) -> list[RunRow]:
        """Runs a crash left 'running' become 'aborted', and the notices `notices` builds for them are
        queued in the same transaction; the runs are returned."""

        def abort(conn: sqlite3.Connection) -> list[RunRow]:
            runs = [
                RunRow(*row)
                for row in conn.execute(
                    f"SELECT {_RUN_COLS} FROM runs WHERE status = 'running' ORDER BY started_at"
                )
            ]
            if not runs:
                return runs
            conn.execute(
                "UPDATE runs SET status = 'aborted', ended_at = ?, "
                "error = 'interrupted: Bridge stopped during this run' WHERE status = 'running'",
                (time.time(),),
            )
            for run in runs if notices is not None else ():
                found = conn.execute(
                    f"SELECT {_SESSION_COLS} FROM sessions WHERE id = ?", (run.session_id,)
                ).fetchone()
                asked = conn.execute(
                    "SELECT content FROM messages WHERE id = ? AND session_id = ?",
                    (run.input_upto, run.session_id),
                ).fetchone()
                insert_outbox(conn, notices(run, SessionRow(*found) if found else None, asked and asked[0]))
            return runs

        return await self._write(abort)

    async def unanswered(self) -> list[Unanswered]:
        rows = await self._rows(
            f"SELECT {', '.join('s.' + c.strip() for c in _SESSION_COLS.split(','))}, m.id, "
            "m.platform_msg_id FROM sessions s JOIN messages m ON m.id = (SELECT MAX(id) FROM messages "
            "WHERE session_id = s.id AND kind = 'user' AND via_session IS NULL) "
            "WHERE s.ended_at IS NULL AND m.id > COALESCE((SELECT MAX(input_upto) FROM runs "
            "WHERE session_id = s.id), 0) ORDER BY m.id"
        )
        return [Unanswered(SessionRow(*row[:-2]), row[-2], row[-1]) for row in rows]

    async def skip_unanswered(self, session_id: str, reason: str) -> bool:
        def skip(conn: sqlite3.Connection) -> bool:
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
            return True

        return await self._write(skip)

    async def get_run(self, run_id: str) -> RunRow | None:
        rows = await self._rows(f"SELECT {_RUN_COLS} FROM runs WHERE id = ?", (run_id,))
        return RunRow(*rows[0]) if rows else None

    # ---------------------------------------------------------------- memories

    async def add_memory(self, scope: str, content: str) -> int:
        cursor = await self._write(
            lambda conn: conn.execute(
                "INSERT INTO memories (scope, content, created_at) VALUES (?, ?, ?)",
                (scope, content, time.time()),
            )
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    async def memories(self, scope: str, limit: int) -> list[str]:
        return await self._read(lambda conn: _memories(conn, scope, limit))


def _insert_session(conn: sqlite3.Connection, key: str, meta: SessionMeta | None) -> SessionRow:
    values = {name: getattr(meta or SessionMeta(), name) for name in _META_FIELDS}
    now = time.time()
    row = SessionRow(id=new_id(), key=key, created_at=now, updated_at=now, **values)
    columns = ("id", "key", "created_at", "updated_at", *values)
    conn.execute(
        f"INSERT INTO sessions ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        (row.id, key, now, now, *values.values()),
    )
    return row


def _scrubbed(*texts: str | None) -> list[str | None]:
    return [None if text is None else scrub(text) for text in texts]


def _answered_upto(conn: sqlite3.Connection, session_id: str) -> int:
    row = conn.execute("SELECT MAX(input_upto) FROM runs WHERE session_id = ?", (session_id,)).fetchone()
    return int(row[0] or 0)


def _insert_message(conn: sqlite3.Connection, session_id: str, kind: str, content: str, **fields: Any) -> int:
    # The one way text enters history: a lone surrogate would make SQLite refuse the whole write.
    content = scrub(content)
    fields = {name: scrub(value) if isinstance(value, str) else value for name, value in fields.items()}
    now = time.time()
    columns = ["session_id", "kind", "content", "created_at", *fields]
    cursor = conn.execute(
        f"INSERT INTO messages ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        (session_id, kind, content, now, *fields.values()),
    )
    conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id))
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def _history(
    conn: sqlite3.Connection, session_id: str, limit: int, chat_only: bool, *, after: int = 0
) -> list[MessageRow]:
    """The newest `limit` rows; with `after`, only rows of turns after user message `after` (a
    summary covers the rest). A run's rows belong to the turn of the message it answered (its
    input_upto); they are always written after it, so `m.id > after` bounds the scan on the index."""
    columns = ", ".join(f"m.{c.strip()}" for c in _MESSAGE_COLS.split(","))
    only_chat = " AND m.kind IN ('user', 'assistant')" if chat_only else ""
    later = (
        " AND m.id > :after AND (CASE WHEN m.kind != 'user' AND r.input_upto IS NOT NULL "
        "THEN r.input_upto ELSE m.id END) > :after"
        if after
        else ""
    )
    rows = conn.execute(
        f"SELECT {columns}, r.input_upto FROM messages m LEFT JOIN runs r ON r.id = m.run_id "
        f"WHERE m.session_id = :session{only_chat}{later} ORDER BY m.id DESC LIMIT :limit",
        {"session": session_id, "limit": limit, "after": after},
    ).fetchall()
    return [MessageRow(*row) for row in reversed(rows)]


def _latest_summary(conn: sqlite3.Connection, session_id: str) -> SummaryRow | None:
    row = conn.execute(
        f"SELECT {_SUMMARY_COLS} FROM summaries WHERE session_id = ? ORDER BY id DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    return SummaryRow(*row) if row else None


def _loaded_groups(conn: sqlite3.Connection, session_id: str) -> set[str]:
    rows = conn.execute(
        # CASE evaluates lazily, so json_type never sees malformed JSON; objects and arrays
        # would come back from json_extract as JSON text, so only 'text' values count.
        "SELECT DISTINCT CASE WHEN json_valid(tool_input) THEN CASE WHEN "
        "json_type(tool_input, '$.group_name') = 'text' "
        "THEN json_extract(tool_input, '$.group_name') END END FROM messages "
        "WHERE session_id = ? AND kind = 'tool_call' AND tool_name = 'load_tool_group' "
        "AND tool_status = 'success'",
        (session_id,),
    ).fetchall()
    # Malformed inputs and non-string group names come back as NULL and are skipped.
    return {row[0] for row in rows if isinstance(row[0], str) and row[0]}


def _memories(conn: sqlite3.Connection, scope: str, limit: int) -> list[str]:
    rows = conn.execute(
        "SELECT content FROM memories WHERE scope = ? ORDER BY id DESC LIMIT ?", (scope, limit)
    ).fetchall()
    return [row[0] for row in reversed(rows)]


def _meta_differs(session: SessionRow, meta: SessionMeta) -> bool:
    return any(
        getattr(meta, name) is not None and getattr(meta, name) != getattr(session, name)
        for name in _META_FIELDS
    )


def dumps(value: Any) -> str:
    """JSON as stored in tool_input: compact and stable."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
