"""The shared intake queue, and what workers sharing a database need: claims, next message, dead rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

from bridge.store.base import OPEN_STATES, OutboxItem, OutboxRow, SessionRow
from bridge.store.engine import Conn, Database, of_workers
from bridge.store.sessions import SESSION_COLS

_OUTBOX_FIELDS = tuple(f.name for f in dataclasses.fields(OutboxItem))
# The channel the intake trigger notifies (PostgreSQL's migrations, version 7), with "<session id>
# <message id>" since version 22 (a session id alone before; empty: chats left over by a claim).
INTAKE_CHANNEL = "bridge_intake"
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
    # The newest of its messages waiting then: a run that starts later in collect mode takes up every
    # one up to it (in followup mode, only the one it was claimed for).
    newest_id: int
    # Other workers that left the chat a run in progress or a message not yet sent (left_in_chats),
    # looked for once its lease was taken.
    left: frozenset[str | None] = frozenset()


def claim_sessions(
    conn: Conn,
    limit: int,
    skip: Collection[str],
    surfaces: Collection[str],
    named: Collection[str] | None = None,
    me: str | None = None,
) -> list[Claimed]:
    """Claim up to `limit` chats with messages waiting, oldest message first, on the lease connection.

    One statement: the chats with the oldest waiting messages (through the intake index on session
    and message), or only the chats `named` (by session id: those a notification named), their rows
    locked FOR NO KEY UPDATE SKIP LOCKED so two workers claiming at once split them rather than try the
    same ones; then each chat's lease tried in that order until `limit` are taken. The lease (a
    session-level advisory lock, kept after the statement) keeps the chat this worker's until it lets
    go. NO KEY: a run start's insert, which checks its foreign key to the session row, is not held up.
    Chats in `skip` (this worker runs them already) and on surfaces it cannot send on are left.
    With `me`, the claiming worker's id, what other workers left in the chats claimed is looked for in
    a second statement on the same trip, which sees all that was committed before their leases were
    taken (the claim's own snapshot is older than its locks).
    """
    if limit <= 0 or not surfaces or (named is not None and not named):
        return []
    cols = ", ".join("s." + c.strip() for c in SESSION_COLS.split(","))
    marks = ", ".join("?" * len(surfaces))
    only = "WHERE session_id = ANY(?) " if named is not None else ""
    # The leases are tried in the outer query, above the materialized candidates and below LIMIT: the
    # executor pulls candidates one at a time, so no lease is taken past the limit.
    rows = conn.execute(
        "WITH waiting AS (SELECT session_id, MIN(message_id) AS message_id, MAX(message_id) AS newest "
        f"FROM intake {only}GROUP BY session_id ORDER BY 2 LIMIT ?), "
        f"candidates AS MATERIALIZED (SELECT {cols}, w.message_id AS waiting_id, m.platform_msg_id, w.newest "
        "FROM waiting w JOIN sessions s ON s.id = w.session_id JOIN messages m ON m.id = w.message_id "
        f"WHERE s.ended_at IS NULL AND s.surface IN ({marks}) AND s.key <> ALL(?) "
        "ORDER BY w.message_id FOR NO KEY UPDATE OF s SKIP LOCKED) "
        "SELECT c.*, (SELECT COUNT(*) FROM candidates) FROM candidates c "
        "WHERE pg_try_advisory_lock(hashtextextended(? || c.key, 0)) LIMIT ?",
        (
            *([list(named)] if named is not None else []),
            CLAIM_WINDOW,
            *surfaces,
            list(skip),
            session_lease(""),
            limit,
        ),
    ).fetchall()
    claimed = [Claimed(SessionRow(*row[:-4]), row[-4], row[-3], row[-2]) for row in rows]
    if claimed and me is not None:
        left = left_in_chats(conn, [found.session.key for found in claimed], me, surfaces)
        claimed = [dataclasses.replace(c, left=frozenset(left.get(c.session.key, ()))) for c in claimed]
    if len(claimed) == limit and rows[-1][-1] > limit:
        # Chats left over, which another worker claiming meanwhile skipped while this statement held
        # their rows: it is told to look again.
        conn.execute(f"SELECT pg_notify('{INTAKE_CHANNEL}', '')")
    return claimed


def count_waiting(conn: Conn, session_id: str) -> int:
    """How many of the session's messages no run has taken up yet (through the intake index)."""
    return int(conn.execute("SELECT COUNT(*) FROM intake WHERE session_id = ?", (session_id,)).fetchone()[0])


def left_in_chats(
    conn: Conn, keys: Collection[str], me: str, surfaces: Collection[str]
) -> dict[str, set[str | None]]:
    """By chat key, the workers other than `me` that left it a run in progress or a message not yet
    sent (a reply, a notice; tool activity aside) on the given surfaces (None: rows no worker sends
    yet). Chats with none are left out."""
    if not keys or not surfaces:
        return {}
    states = ", ".join(f"'{state}'" for state in OPEN_STATES)
    chats = ", ".join("?" * len(keys))
    marks = ", ".join("?" * len(surfaces))
    rows = conn.execute(
        f"SELECT session_key, worker_id FROM outbox WHERE session_key IN ({chats}) "
        f"AND state IN ({states}) AND kind != 'activity' AND surface IN ({marks}) "
        "AND (worker_id IS NULL OR worker_id != ?) "
        "UNION SELECT s.key, r.worker_id FROM runs r JOIN sessions s ON s.id = r.session_id "
        f"WHERE s.key IN ({chats}) AND r.status = 'running' AND (r.worker_id IS NULL OR r.worker_id != ?)",
        (*keys, *surfaces, me, *keys, me),
    ).fetchall()
    left: dict[str, set[str | None]] = {}
    for key, worker in rows:
        left.setdefault(key, set()).add(worker)
    return left


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
        return await self._read(lambda conn: count_waiting(conn, session_id))

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
        sent (left_in_chats)."""
        return await self._read(lambda conn: left_in_chats(conn, [key], me, surfaces).get(key, set()))

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
