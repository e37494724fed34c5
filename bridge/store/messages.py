"""Messages and memories: what a session's history holds, and what the agent was asked to remember."""

from __future__ import annotations

import json
import time
from typing import Any

from bridge.store.base import Loaded, MessageRow, QueueFull, ToolExchange
from bridge.store.engine import Conn, Cursor, T, Work, inserted_id
from bridge.store.intake import count_waiting
from bridge.store.sessions import SessionTable
from bridge.store.window import LOAD_SKILL, LOAD_TOOL_GROUP, loaded_by
from bridge.text import scrub

_MESSAGE_COLS = (
    "id, session_id, kind, content, created_at, run_id, step, tool_name, tool_call_id, tool_input, "
    "tool_status, sender, via_session, media"
)


class MessageTable(SessionTable):
    """Messages (user, assistant, tool call and result) and memories; adding a message also moves its
    session's updated_at, in the cache as in the table."""

    async def add_user_message(
        self,
        session_id: str,
        content: str,
        *,
        sender: str | None = None,
        platform_msg_id: str | None = None,
        via_session: str | None = None,
        queued: bool = True,
        media: str | None = None,
        queue_limit: int | None = None,
    ) -> int | None:
        """Store a user message; None when the platform message id was stored before (a redelivery,
        or a second worker that received it too).

        A chat message also joins the intake queue, in the same transaction, until a run takes it up:
        where several workers share the database, any of them may claim it (bridge.gateway.sharing).
        `queued=False` keeps it out: a scheduled task's or a webhook's prompt, run by its caller.
        With `queue_limit`, QueueFull if that many of the chat's messages wait already (counted in the
        same transaction, not in a read of its own before it).
        """

        def add(conn: Conn) -> int | QueueFull | None:
            if queue_limit is not None and count_waiting(conn, session_id) >= queue_limit:
                # Returned, not raised: the other writes committed with this one go on.
                return QueueFull(f"{queue_limit} messages of this chat wait already")
            found = insert_message(
                conn,
                session_id,
                "user",
                content,
                sender=sender,
                platform_msg_id=platform_msg_id,
                via_session=via_session,
                media=media,
            )
            if found is not None and via_session is None and queued:
                conn.execute("INSERT INTO intake (message_id, session_id) VALUES (?, ?)", (found, session_id))
            return found

        stored = await self._add(session_id, add)
        if isinstance(stored, QueueFull):
            raise stored
        return stored

    async def set_user_message(
        self, session_id: str, message_id: int, content: str, media: str | None
    ) -> None:
        """A user message's text and attachments once its run has fetched (and transcribed) them.

        The one change ever made to a stored message: it still says what the user sent, now read.
        """
        await self._write(
            lambda conn: conn.execute(
                "UPDATE messages SET content = ?, media = ? "
                "WHERE id = ? AND session_id = ? AND kind = 'user'",
                (scrub(content), media, message_id, session_id),
            )
        )
        self._message_changed(session_id, message_id, content, media)

    def _message_changed(self, session_id: str, message_id: int, content: str, media: str | None) -> None:
        """Hook for a store that keeps history windows: the row this process holds is replaced (other
        workers' windows, on PostgreSQL, read it again: the change takes a new sequence number)."""

    async def add_assistant_message(self, session_id: str, run_id: str | None, content: str) -> int:
        return await self._add(
            session_id,
            lambda conn: _written(insert_message(conn, session_id, "assistant", content, run_id=run_id)),
        )

    async def add_tool_exchange(self, session_id: str, run_id: str, exchange: ToolExchange) -> None:
        common = {"run_id": run_id, "step": exchange.step, "tool_name": exchange.tool_name}

        def both(conn: Conn) -> None:
            insert_message(
                conn,
                session_id,
                "tool_call",
                exchange.preamble,
                tool_call_id=exchange.call_id,
                tool_input=exchange.tool_input,
                tool_status=exchange.status,
                **common,
            )
            insert_message(
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
        return await self._read(lambda conn: select_history(conn, session_id, limit, chat_only))

    async def count_messages(self, session_id: str) -> int:
        return int(await self._scalar("SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)))

    async def search_messages(self, session_id: str, query: str, limit: int) -> list[MessageRow]:
        pattern = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = await self._rows(
            # lower() on both sides: SQLite's LIKE ignores case and PostgreSQL's does not.
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE session_id = ? AND kind IN ('user', 'assistant') "
            "AND lower(content) LIKE lower(?) ESCAPE '\\' ORDER BY id DESC LIMIT ?",
            (session_id, pattern, limit),
        )
        return [MessageRow(*row) for row in rows]

    async def loaded(self, session_id: str) -> Loaded:
        """Groups and skills loaded anywhere in the session's history: one query on a partial index."""
        return await self._read(lambda conn: select_loaded(conn, session_id), quick=True)

    async def loaded_groups(self, session_id: str) -> set[str]:
        return set((await self.loaded(session_id)).groups)

    async def loaded_skills(self, session_id: str) -> set[str]:
        return set((await self.loaded(session_id)).skills)

    # ---------------------------------------------------------------- memories

    async def add_memory(self, scope: str, content: str) -> int:
        return await self._write(
            lambda conn: inserted_id(
                conn.execute(
                    "INSERT INTO memories (scope, content, created_at) VALUES (?, ?, ?) RETURNING id",
                    (scope, content, time.time()),
                )
            )
        )

    async def memories(self, scope: str, limit: int) -> list[str]:
        return await self._read(lambda conn: select_memories(conn, scope, limit))


def insert_message(conn: Conn, session_id: str, kind: str, content: str, **fields: Any) -> int | None:
    """The new row's id; None when its platform_msg_id was stored before (the message is not
    stored twice, whichever worker or webhook retry brought it again)."""
    # The one way text enters history: a lone surrogate would make the database refuse the write.
    content = scrub(content)
    fields = {name: scrub(value) if isinstance(value, str) else value for name, value in fields.items()}
    now = time.time()
    columns = ["session_id", "kind", "content", "created_at", *fields]
    once = (
        " ON CONFLICT (platform_msg_id) WHERE platform_msg_id IS NOT NULL DO NOTHING"
        if fields.get("platform_msg_id") is not None
        else ""
    )
    row = conn.execute(
        f"INSERT INTO messages ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}){once} "
        "RETURNING id",
        (session_id, kind, content, now, *fields.values()),
    ).fetchone()
    # The session's updated_at follows in the database (trigger message_touches_session; on
    # PostgreSQL message_sequence, which also numbers the message in its session).
    return None if row is None else int(row[0])


def _written(message_id: int | None) -> int:
    """The id of a row written without a platform id, which is never refused as a duplicate."""
    assert message_id is not None
    return message_id


def since_sql(session_id: str, since: int, column: str) -> tuple[str, tuple[Any, ...]]:
    """The statement (and its parameters) of every row of the session after `since` by `column`, in
    id order: a kept window's top-up. `column` is "id" or, on PostgreSQL, "seq"."""
    if column not in ("id", "seq"):
        raise ValueError(f"no window is kept by {column!r}")
    columns = ", ".join(f"m.{c.strip()}" for c in _MESSAGE_COLS.split(","))
    return (
        f"SELECT {columns}, r.input_upto FROM messages m LEFT JOIN runs r ON r.id = m.run_id "
        f"WHERE m.session_id = ? AND m.{column} > ? ORDER BY m.id",
        (session_id, since),
    )


def since_rows(cursor: Cursor) -> list[MessageRow]:
    """The rows of a since_sql statement."""
    return [MessageRow(*row) for row in cursor.fetchall()]


def select_history(
    conn: Conn, session_id: str, limit: int, chat_only: bool, *, after: int = 0
) -> list[MessageRow]:
    """The newest `limit` rows; with `after`, only rows of turns after user message `after` (a
    summary covers the rest). A run's rows belong to the turn of the message it answered (its
    input_upto); they are always written after it, so `m.id > after` bounds the scan on the index."""
    return history_rows(query_history(conn, session_id, limit, chat_only, after=after))


# The user message the session's newest summary covers up to (0: none), in SQL, so the history
# after it is read by one statement that need not wait for the summary's.
SUMMARIZED_UPTO = (
    "COALESCE((SELECT upto FROM summaries WHERE session_id = :session ORDER BY id DESC LIMIT 1), 0)"
)


def query_history(
    conn: Conn, session_id: str, limit: int, chat_only: bool, *, after: int | None = 0
) -> Cursor:
    """select_history's statement, sent; its rows are read by history_rows. `after=None`: after what
    the session's newest summary covers, found by the same statement."""
    columns = ", ".join(f"m.{c.strip()}" for c in _MESSAGE_COLS.split(","))
    only_chat = " AND m.kind IN ('user', 'assistant')" if chat_only else ""
    bound = SUMMARIZED_UPTO if after is None else ":after"
    later = (
        f" AND m.id > {bound} AND (CASE WHEN m.kind != 'user' AND r.input_upto IS NOT NULL "
        f"THEN r.input_upto ELSE m.id END) > {bound}"
        if after != 0
        else ""
    )
    return conn.execute(
        f"SELECT {columns}, r.input_upto FROM messages m LEFT JOIN runs r ON r.id = m.run_id "
        f"WHERE m.session_id = :session{only_chat}{later} ORDER BY m.id DESC LIMIT :limit",
        {"session": session_id, "limit": limit, "after": after or 0},
    )


def history_rows(cursor: Cursor) -> list[MessageRow]:
    """The rows of query_history's statement, oldest first."""
    return [MessageRow(*row) for row in reversed(cursor.fetchall())]


# Matches the partial index messages_loads exactly, so only the session's loads are read.
LOADS_SQL = (
    "SELECT DISTINCT tool_name, tool_input FROM messages "
    f"WHERE session_id = ? AND kind = 'tool_call' AND tool_name IN ('{LOAD_TOOL_GROUP}', '{LOAD_SKILL}') "
    "AND tool_status = 'success'"
)


def select_loaded(conn: Conn, session_id: str) -> Loaded:
    """One query on the partial index of successful loads; the JSON is read here rather than in SQL,
    so both backends share the query (and a malformed input is skipped the same way on each)."""
    return loaded_of(conn.execute(LOADS_SQL, (session_id,)).fetchall())


def loaded_of(rows: list[Any]) -> Loaded:
    """The groups and skills the rows of LOADS_SQL loaded."""
    loads = [(tool, name) for tool, raw in rows if (name := loaded_by("tool_call", tool, "success", raw))]
    return Loaded(
        frozenset(name for tool, name in loads if tool == LOAD_TOOL_GROUP),
        frozenset(name for tool, name in loads if tool == LOAD_SKILL),
    )


MEMORIES_SQL = "SELECT content FROM memories WHERE scope = ? ORDER BY id DESC LIMIT ?"


def select_memories(conn: Conn, scope: str, limit: int) -> list[str]:
    return memories_of(conn.execute(MEMORIES_SQL, (scope, limit)).fetchall())


def memories_of(rows: list[Any]) -> list[str]:
    """The rows of MEMORIES_SQL, oldest first."""
    return [row[0] for row in reversed(rows)]


def dumps(value: Any) -> str:
    """JSON as stored in tool_input: compact and stable."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
