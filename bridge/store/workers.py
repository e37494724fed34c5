"""The workers table: each process on the database says what it is, what it holds and which chats it
takes, for `bridge status` and for the workers that split the chats among themselves (sharing.py)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass

from bridge.store.engine import Conn, Database

# A worker that has not said it is alive for this long is listed as gone (it beats every few seconds).
ALIVE_WITHIN_S = 15.0
# Rows of workers gone this long are dropped by the next worker to start.
FORGET_AFTER_S = 24 * 3600.0


def surfaces_text(surfaces: Iterable[str]) -> str:
    """Surfaces as the table's `surfaces` column holds them: sorted, comma-separated, so equal sets
    read equal."""
    return ",".join(sorted(set(surfaces)))


@dataclass(frozen=True, slots=True)
class WorkerRow:
    id: str
    host: str
    pid: int
    role: str  # active | standby
    holds: str
    started_at: float
    seen_at: float
    # The surfaces of the chats it takes, comma-separated and sorted ("": none, or it has not said).
    surfaces: str = ""

    def alive(self, now: float) -> bool:
        return now - self.seen_at <= ALIVE_WITHIN_S


class WorkerTable(Database):
    """Register, beat and leave; list for `bridge status` and the workers sharing the runs."""

    async def register_worker(
        self, worker_id: str, *, role: str, holds: str, surfaces: Iterable[str] = ()
    ) -> None:
        now, listed = time.time(), surfaces_text(surfaces)
        await self._write(
            lambda conn: (
                conn.execute("DELETE FROM workers WHERE seen_at < ?", (now - FORGET_AFTER_S,)),
                conn.execute(
                    "INSERT INTO workers (id, host, pid, role, holds, started_at, seen_at, surfaces) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (worker_id, socket.gethostname(), os.getpid(), role, holds, now, now, listed),
                ),
            )
        )

    async def beat_worker(
        self, worker_id: str, *, role: str, holds: str, sole: bool = True, surfaces: Iterable[str] = ()
    ) -> None:
        """Say this worker is alive, and what it is now. Where one worker answers (`sole`), only the
        one holding the database's claim is active, so another row that says active is a worker that
        died without leaving. Workers sharing the runs are all active."""
        listed = surfaces_text(surfaces)

        def beat(conn: Conn) -> None:
            if role == "active" and sole:
                conn.execute("DELETE FROM workers WHERE role = 'active' AND id != ?", (worker_id,))
            conn.execute(
                "UPDATE workers SET role = ?, holds = ?, seen_at = ?, surfaces = ? WHERE id = ?",
                (role, holds, time.time(), listed, worker_id),
            )

        await self._write(beat)

    async def leave_worker(self, worker_id: str) -> None:
        await self._write(lambda conn: conn.execute("DELETE FROM workers WHERE id = ?", (worker_id,)))

    async def end_worker_connections(self, worker_id: str) -> int:
        """End another worker's connections to the database, and so free the locks they hold: how
        many were ended. Only PostgreSQL has connections of other processes to end (PostgresStore);
        on SQLite one process at a time holds the file, so none."""
        return 0

    async def workers(self) -> list[WorkerRow]:
        rows = await self._rows(
            "SELECT id, host, pid, role, holds, started_at, seen_at, surfaces FROM workers "
            "ORDER BY role, started_at"
        )
        return [WorkerRow(*row) for row in rows]
