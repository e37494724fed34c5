"""What the tables run on: each transaction is one plain function of a connection, on either backend."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from bridge.errors import StoreError

T = TypeVar("T")

log = logging.getLogger(__name__)

# The claim of the process that answers on a database (see Database.claim_worker).
WORKER_CLAIM = "bridge.worker"
# How often a standing-by process tries to take over: a killed worker is replaced within this
# (plus its start-up), well inside the 15 s that platforms may go unpolled.
STANDBY_POLL_S = 2.0
# The active process checks its claim this often, and stops once it could not confirm it for
# CLAIM_LOST_AFTER_S; a standby that takes the claim waits TAKEOVER_GRACE_S (longer) before it
# starts, so the two never run at once.
CLAIM_CHECK_S = 0.5
CLAIM_LOST_AFTER_S = 1.5
TAKEOVER_GRACE_S = 5.0

Params = Sequence[Any] | Mapping[str, Any]


class Cursor(Protocol):
    """The part of a DB-API cursor the tables use; sqlite3's and psycopg's both have it."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """A connection inside a transaction. SQL is written once, in the dialect both backends share:
    `?` or `:name` placeholders, `RETURNING id` for new ids, `ON CONFLICT` for upserts."""

    def execute(self, sql: str, params: Params = (), /) -> Cursor: ...


Work = Callable[[Conn], T]


class Engine(Protocol):
    """Runs transaction functions on a database. A function queued by `write` runs to its end, as one
    transaction, even if the task awaiting it is cancelled: the caller may miss the result, the
    database never holds half of it."""

    # Names the database in errors and in `bridge status` ("database data/bridge.db", "postgresql://h/db").
    label: str

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def write(self, work: Work[T]) -> T: ...

    async def read(self, work: Work[T], *, snapshot: bool = False) -> T: ...
    async def backup(self, target: Path) -> None: ...
    async def claim(self, name: str) -> bool:
        """Hold the lock `name` for as long as the engine is open, and across every process using the
        database; False when another holds it. A process that dies loses its locks at once."""
        ...

    async def holds(self, name: str) -> bool:
        """Whether this process still holds `name` (the connection holding it may have died)."""
        ...


class Database:
    """The base of every table class: the engine, and the few ways the tables call it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def open(self) -> None:
        await self.engine.open()

    async def close(self) -> None:
        await self.engine.close()

    async def backup(self, target: Path) -> None:
        await self.engine.backup(target)

    async def claim_worker(self, *, standby: asyncio.Event | None = None) -> bool:
        """Make this process the one that answers on the database: True once it is.

        One process at a time runs the platforms and the runs; a second one on the same database
        would answer messages twice. Without `standby`, a database another process holds is a
        StoreError saying so (`bridge chat`). With it (`bridge run`), this process stands by and
        takes over when the other one ends, however it ends (a killed process frees its claim at
        once); False if `standby` is set first (a SIGTERM while standing by).
        """
        if await self.engine.claim(WORKER_CLAIM):
            return True
        if standby is None:
            raise StoreError(
                f"another Bridge process is already running on {self.engine.label}",
                remedy="stop it first: one `bridge chat` per database, or run `bridge run` to stand by",
            )
        log.warning(
            "standing by: another Bridge process is running on %s; this one takes over when it ends",
            self.engine.label,
        )
        while not standby.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(standby.wait(), STANDBY_POLL_S)
            if not standby.is_set() and await self._try_claim():
                # The other process may be alive and merely cut off from the database (a server
                # restart): it sees that within CLAIM_LOST_AFTER_S and stops. Wait for that first,
                # so two processes never poll or answer at once.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(standby.wait(), TAKEOVER_GRACE_S)
                if standby.is_set():
                    return False
                log.warning("taking over: the other process on %s has ended", self.engine.label)
                return True
        return False

    async def watch_claim(self, lost: Callable[[], object]) -> None:
        """While this process answers: check every CLAIM_CHECK_S that it still holds the database,
        take it again if its connection died, and call `lost` once it could not show that for
        CLAIM_LOST_AFTER_S (a standby may be taking over then)."""
        confirmed = time.monotonic()
        while True:
            await asyncio.sleep(CLAIM_CHECK_S)
            if await self.engine.holds(WORKER_CLAIM):
                confirmed = time.monotonic()
            elif await self._try_claim():
                log.warning("took the claim on %s back after its connection dropped", self.engine.label)
                confirmed = time.monotonic()
            elif time.monotonic() - confirmed > CLAIM_LOST_AFTER_S:
                log.error("lost the claim on %s; stopping at once", self.engine.label)
                lost()
                return

    async def _try_claim(self) -> bool:
        try:
            return await self.engine.claim(WORKER_CLAIM)
        except StoreError as exc:
            log.warning("cannot reach %s to take its claim: %s", self.engine.label, exc)
            return False

    async def _write(self, work: Work[T]) -> T:
        return await self.engine.write(work)

    async def _read(self, work: Work[T], *, snapshot: bool = False) -> T:
        return await self.engine.read(work, snapshot=snapshot)

    async def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        values = tuple(params)
        return await self._read(lambda conn: conn.execute(sql, values).fetchall())

    async def _scalar(self, sql: str, params: Iterable[Any] = ()) -> Any:
        rows = await self._rows(sql, params)
        return rows[0][0] if rows else None


def inserted_id(cursor: Cursor) -> int:
    """The id an `INSERT ... RETURNING id` wrote."""
    row = cursor.fetchone()
    assert row is not None, "INSERT ... RETURNING id returned no row"
    return int(row[0])
