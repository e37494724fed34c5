"""The outbox table: every item the bot means to send, one row per chunk, and its delivery state."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Sequence
from typing import Any

from bridge.store.base import OutboxItem, OutboxRow, OutboxState, SessionRow
from bridge.store.engine import Conn, Database
from bridge.text import scrub

_OUTBOX_FIELDS = tuple(f.name for f in dataclasses.fields(OutboxItem))
_OUTBOX_TEXT = _OUTBOX_FIELDS.index("text")


class OutboxTable(Database):
    """Writes and reads outbox rows; the store writes them in its own transactions too (insert_outbox)."""

    async def add_outbox(self, *items: OutboxItem) -> list[int]:
        try:
            return await self._write(lambda conn: insert_outbox(conn, items))
        except DuplicateOutbox:
            return []

    async def mark_outbox(
        self,
        item_id: int,
        state: OutboxState,
        *,
        platform_msg_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        await self._write(
            lambda conn: conn.execute(
                "UPDATE outbox SET state = ?, platform_msg_id = COALESCE(?, platform_msg_id), "
                "reason = COALESCE(?, reason), updated_at = ? WHERE id = ?",
                (state, platform_msg_id, reason, time.time(), item_id),
            )
        )

    async def reopen_failed(self, row_id: int, reason: str) -> OutboxRow | None:
        """A `failed` or `uncertain` reply or notice made `pending` again, for this worker to send;
        None when the row is neither (already retried, by another request too: only one of them gets
        it) or is tool activity, which is never sent late. An uncertain row may have arrived: whoever
        asks has been told it may show twice."""
        columns = f"id, platform_msg_id, created_at, {', '.join(_OUTBOX_FIELDS)}"
        found = await self._write(
            lambda conn: conn.execute(
                "UPDATE outbox SET state = 'pending', reason = ?, worker_id = ?, updated_at = ? "
                "WHERE id = ? AND state IN ('failed', 'uncertain') AND kind != 'activity' "
                f"RETURNING {columns}",
                (reason, self.worker_id, time.time(), row_id),
            ).fetchone()
        )
        return _row(found) if found is not None else None

    async def count_outbox(self, session: SessionRow, state: OutboxState) -> int:
        # Items sent before a chat had a session (a command's answer, a refusal) carry only the key:
        # they count for the session that follows them, not for one that ended before them.
        return int(
            await self._scalar(
                "SELECT COUNT(*) FROM outbox WHERE session_key = ? AND state = ? AND (session_id = ? OR "
                "(session_id IS NULL AND created_at >= COALESCE((SELECT MAX(ended_at) FROM sessions "
                "WHERE key = ? AND ended_at IS NOT NULL), 0)))",
                (session.key, state, session.id, session.key),
            )
        )

    async def last_outbox_id(self) -> int:
        """The newest row's id (0 for none)."""
        return int(await self._scalar("SELECT COALESCE(MAX(id), 0) FROM outbox") or 0)

    async def outbox_counts(self) -> dict[str, int]:
        """Rows of every state (a scan of the table: for metrics, read off the event loop)."""
        rows = await self._rows("SELECT state, COUNT(*) FROM outbox GROUP BY state")
        return {str(state): int(count) for state, count in rows}

    async def outbox(
        self,
        *,
        session_id: str | None = None,
        state: OutboxState | Collection[OutboxState] | None = None,
        newest: int | None = None,
        upto: int | None = None,
    ) -> list[OutboxRow]:
        where: list[str] = ["1 = 1"]
        params: list[object] = []
        if upto is not None:
            where.append("id <= ?")
            params.append(upto)
        if session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        if state is not None:
            states = [state] if isinstance(state, str) else list(state)
            where.append(f"state IN ({', '.join('?' * len(states))})")
            params.extend(states)
        order = "ORDER BY id"
        if newest is not None:
            order = "ORDER BY id DESC LIMIT ?"
            params.append(newest)
        rows = await self._rows(
            f"SELECT id, platform_msg_id, created_at, {', '.join(_OUTBOX_FIELDS)} FROM outbox "
            f"WHERE {' AND '.join(where)} {order}",
            params,
        )
        if newest is not None:
            rows.reverse()
        return [_row(row) for row in rows]


def _row(row: Sequence[Any]) -> OutboxRow:
    """An outbox row read as `id, platform_msg_id, created_at, <the item's fields>`."""
    return OutboxRow(row[0], OutboxItem(**dict(zip(_OUTBOX_FIELDS, row[3:], strict=True))), row[1], row[2])


class DuplicateOutbox(Exception):
    """An item's dedupe_key was written before: the transaction that wrote it again is undone."""


def insert_outbox(conn: Conn, items: Collection[OutboxItem]) -> list[int]:
    """Insert delivery rows in order, with their ids; DuplicateOutbox if a dedupe_key was written
    before (the caller's transaction then rolls back: never send twice)."""
    now = time.time()
    columns = [*_OUTBOX_FIELDS, "created_at", "updated_at"]
    sql = (
        f"INSERT INTO outbox ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
        "ON CONFLICT (dedupe_key, part) WHERE dedupe_key IS NOT NULL DO NOTHING RETURNING id"
    )
    ids = []
    for item in items:
        # Shallow on purpose: the fields are plain values, and asdict's deep copy showed up in profiles.
        values = [getattr(item, name) for name in _OUTBOX_FIELDS]
        values[_OUTBOX_TEXT] = scrub(values[_OUTBOX_TEXT])
        row = conn.execute(sql, (*values, now, now)).fetchone()
        if row is None:
            raise DuplicateOutbox(item.dedupe_key)
        ids.append(int(row[0]))
    return ids
