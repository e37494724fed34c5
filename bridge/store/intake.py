"""The shared intake queue, and what workers sharing a database need: claims, next message, dead rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

from bridge.store.base import OPEN_STATES, OutboxItem, OutboxRow, SessionRow
from bridge.store.engine import Conn, Database, of_workers
from bridge.store.pg_leases import INTAKE_CHANNEL, lock_sql
from bridge.store.sessions import SESSION_COLS

_OUTBOX_FIELDS = tuple(f.name for f in dataclasses.fields(OutboxItem))
# How many of the oldest waiting chats one claim looks at (chats busy in other workers among them).
CLAIM_WINDOW = 200


def session_lease(key: str) -> str:
    """The advisory lock a worker holds while it runs a session's turns."""
    return f"bridge.session:{key}"


def worker_lease(worker_id: str) -> str:
    """The advisory lock a worker holds for as long as it lives: free once it is dead."""
    return f"bridge.worker:{worker_id}"


@dataclasses.dataclass(frozen=True, slots=True)
class Claimed:
    """A chat this worker now holds the lease of, and the oldest of its messages waiting."""

    session: SessionRow
    message_id: int
    platform_msg_id: str | None


def claim_sessions(conn: Conn, limit: int, skip: Collection[str], surfaces: Collection[str]) -> list[Claimed]:
    """Claim up to `limit` chats with messages waiting, oldest message first, on the lease connection.

    The chats' rows are locked FOR UPDATE SKIP LOCKED while their leases are tried, so two workers
    claiming at once split the queue instead of both trying the same chats; the lease (a session-level
    advisory lock, kept after the transaction) is what keeps the chat this worker's until it lets go.
    Chats in `skip` (this worker runs them already) and on surfaces it cannot send on are left.
    """
    if limit <= 0 or not surfaces:
        return []
    cols = ", ".join("s." + c.strip() for c in SESSION_COLS.split(","))
    marks = ", ".join("?" * len(surfaces))
    rows = conn.execute(
        f"SELECT {cols}, i.message_id, m.platform_msg_id FROM (SELECT session_id, MIN(message_id) "
        "AS message_id FROM intake GROUP BY session_id ORDER BY 2 LIMIT ?) i "
        "JOIN sessions s ON s.id = i.session_id JOIN messages m ON m.id = i.message_id "
        f"WHERE s.ended_at IS NULL AND s.surface IN ({marks}) ORDER BY i.message_id "
        "FOR UPDATE OF s SKIP LOCKED",
        (CLAIM_WINDOW, *surfaces),
    ).fetchall()
    claimed: list[Claimed] = []
    for index, row in enumerate(rows):
        session = SessionRow(*row[:-2])
        if session.key in skip:
            continue
        if conn.execute(*lock_sql(session_lease(session.key))).fetchone()[0]:
            claimed.append(Claimed(session, row[-2], row[-1]))
            if len(claimed) == limit:
                if index + 1 < len(rows):
                    # Chats left over, locked by this claim until it commits: another worker that
                    # skipped them meanwhile is told to look again (delivered at commit).
                    conn.execute(f"SELECT pg_notify('{INTAKE_CHANNEL}', '')")
                break
    return claimed


class IntakeTable(Database):
    """Reads and writes for workers sharing one database (bridge.gateway.sharing)."""

    async def next_waiting(self, session_id: str) -> tuple[int, str | None] | None:
        """The session's oldest message no run has taken up: its id and platform id."""
        rows = await self._rows(
            "SELECT i.message_id, m.platform_msg_id FROM intake i JOIN messages m ON m.id = i.message_id "
            "WHERE i.session_id = ? ORDER BY i.message_id LIMIT 1",
            (session_id,),
        )
        return (int(rows[0][0]), rows[0][1]) if rows else None

    async def count_waiting(self, session_id: str) -> int:
        """How many of the session's messages no run has taken up yet."""
        return int(await self._scalar("SELECT COUNT(*) FROM intake WHERE session_id = ?", (session_id,)))

    async def drop_waiting(self, session_id: str, upto: int) -> None:
        """Take messages off the queue that a run failed on: the chat was told, and /retry redoes it."""
        await self._write(
            lambda conn: conn.execute(
                "DELETE FROM intake WHERE session_id = ? AND message_id <= ?", (session_id, upto)
            )
        )

    async def others_with_work(self, me: str) -> set[str | None]:
        """Workers, other than `me`, that have runs in progress or outbox rows not yet sent (None:
        rows no worker sends, such as the notices of runs a dead worker left)."""
        rows = await self._rows(
            "SELECT DISTINCT worker_id FROM runs WHERE status = 'running' AND "
            "(worker_id IS NULL OR worker_id != ?) UNION SELECT DISTINCT worker_id FROM outbox "
            "WHERE state IN ('pending', 'sending') AND (worker_id IS NULL OR worker_id != ?)",
            (me, me),
        )
        return {row[0] for row in rows}

    async def left_in(self, key: str, me: str, surfaces: Collection[str]) -> set[str | None]:
        """Workers, other than `me`, that left the chat `key` a run in progress or a message not yet
        sent (a reply, a notice; tool activity aside) on the given surfaces (None: rows no worker
        sends yet)."""
        if not surfaces:
            return set()
        states = ", ".join(f"'{state}'" for state in OPEN_STATES)
        marks = ", ".join("?" * len(surfaces))
        rows = await self._rows(
            f"SELECT worker_id FROM outbox WHERE session_key = ? AND state IN ({states}) "
            f"AND kind != 'activity' AND surface IN ({marks}) AND (worker_id IS NULL OR worker_id != ?) "
            "UNION SELECT r.worker_id FROM runs r JOIN sessions s ON s.id = r.session_id "
            "WHERE s.key = ? AND r.status = 'running' AND (r.worker_id IS NULL OR r.worker_id != ?)",
            (key, *surfaces, me, key, me),
        )
        return {row[0] for row in rows}

    async def take_over_outbox(
        self, workers: Iterable[str | None], me: str, surfaces: Collection[str]
    ) -> list[OutboxRow]:
        """Make the unsent outbox rows of the given (dead) workers this worker's, oldest first, on the
        surfaces it can send on.

        One UPDATE: two workers taking over at once each get the rows the other did not (the second
        one's WHERE is checked again once the first commits), so every row is sent by one worker.
        """
        if not surfaces:
            return []
        where, params = of_workers("worker_id", workers)
        states = ", ".join(f"'{state}'" for state in OPEN_STATES)
        marks = ", ".join("?" * len(surfaces))
        rows = await self._write(
            lambda conn: conn.execute(
                f"UPDATE outbox SET worker_id = ? WHERE state IN ({states}) AND {where} "
                f"AND surface IN ({marks}) "
                f"RETURNING id, platform_msg_id, created_at, {', '.join(_OUTBOX_FIELDS)}",
                (me, *params, *surfaces),
            ).fetchall()
        )
        found = [
            OutboxRow(row[0], OutboxItem(**dict(zip(_OUTBOX_FIELDS, row[3:], strict=True))), row[1], row[2])
            for row in rows
        ]
        return sorted(found, key=lambda row: row.id)
