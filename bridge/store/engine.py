"""What the tables run on: each transaction is one plain function of a connection, on either backend."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

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
    # Whether a row's id is never seen before a smaller one: commits in id order (see store/window.py).
    ids_in_commit_order: bool

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def write(self, work: Work[T], *, slow: bool = False) -> T:
        """Run `work` as one write transaction. `slow`: it may take long (a sweep over many rows), so
        an engine that writes on the event loop runs it elsewhere."""
        ...

    async def read(self, work: Work[T], *, snapshot: bool = False, quick: bool = False) -> T:
        """Run `work` as reads. `snapshot`: in one transaction, so they agree. `quick`: an indexed read
        of a bounded number of rows, which an engine may run on the event loop, after the writes
        queued before it."""
        ...

    async def backup(self, target: Path) -> None: ...
    async def claim(self, name: str, *, shared: bool = False) -> bool:
        """Hold the lock `name` for as long as the engine is open, and across every process using the
        database; False when another holds it. A process that dies loses its locks at once. Shared:
        any number of processes may hold it shared, while none holds it alone."""
        ...

    async def holds(self, name: str) -> bool:
        """Whether this process still holds `name` (the connection holding it may have died)."""
        ...

    def dropped(self, name: str) -> bool:
        """Without a round trip, and so without yielding to other tasks: whether the server has
        already ended the connection holding `name` (its goodbye is waiting to be read). For a process
        that was frozen: whether another may hold `name` now. False where a claim cannot pass."""
        ...


class Database:
    """The base of every table class: the engine, and the few ways the tables call it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # The worker that writes runs and outbox rows here, where several share the database (see
        # bridge.gateway.sharing); None for the one process of an embedded database.
        self.worker_id: str | None = None

    async def open(self) -> None:
        await self.engine.open()

    async def close(self) -> None:
        await self.engine.close()

    async def backup(self, target: Path) -> None:
        await self.engine.backup(target)

    async def _write(self, work: Work[T], *, slow: bool = False) -> T:
        return await self.engine.write(work, slow=slow)

    async def _read(self, work: Work[T], *, snapshot: bool = False, quick: bool = False) -> T:
        return await self.engine.read(work, snapshot=snapshot, quick=quick)

    async def ping(self) -> None:
        """A trivial read: the database answers (through the same path as other reads)."""
        await self._read(lambda conn: conn.execute("SELECT 1").fetchall())

    async def _rows(self, sql: str, params: Iterable[Any] = (), *, quick: bool = False) -> list[Any]:
        values = tuple(params)
        return await self._read(lambda conn: conn.execute(sql, values).fetchall(), quick=quick)

    async def _scalar(self, sql: str, params: Iterable[Any] = ()) -> Any:
        rows = await self._rows(sql, params)
        return rows[0][0] if rows else None


def inserted_id(cursor: Cursor) -> int:
    """The id an `INSERT ... RETURNING id` wrote."""
    row = cursor.fetchone()
    assert row is not None, "INSERT ... RETURNING id returned no row"
    return int(row[0])


def of_workers(column: str, workers: Iterable[str | None]) -> tuple[str, tuple[str, ...]]:
    """A WHERE clause for rows of the given workers (None: rows of no worker), with its parameters."""
    given = list(workers)
    named = tuple(w for w in given if w is not None)
    parts = [f"{column} IS NULL"] if None in given else []
    if named:
        parts.append(f"{column} IN ({', '.join('?' * len(named))})")
    return "(" + (" OR ".join(parts) or "1 = 0") + ")", named
