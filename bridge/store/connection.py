"""The SQLite connection under the store: open, integrity and version checks, migrations, transactions."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

import aiosqlite

from bridge.errors import StoreError
from bridge.store.migrations import MIGRATIONS, SCHEMA_VERSION

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
Work = Callable[[sqlite3.Connection], T]


class SQLiteConnection:
    """One aiosqlite connection; each write transaction is one trip to its thread, so none interleave."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._db: aiosqlite.Connection | None = None

    async def open(self) -> None:
        db = await _connect(self.path, "open database")
        self._db = db
        db.row_factory = sqlite3.Row
        try:
            # Refuse a newer schema before touching the file (journal_mode would rewrite its header).
            await self._check_version()
            await self._check_integrity()
            await db.execute("PRAGMA journal_mode = WAL")
            await db.execute("PRAGMA foreign_keys = ON")
            # NORMAL in WAL mode survives a process crash; only an OS crash can lose the last commit.
            await db.execute("PRAGMA synchronous = NORMAL")
            await db.execute("PRAGMA busy_timeout = 5000")
            await self._migrate()
        except sqlite3.DatabaseError as exc:
            await self.close()
            raise StoreError(
                f"database {self.path} is not usable: {exc}",
                remedy="check that [storage] path names a Bridge database, or move the file away",
            ) from None
        except BaseException:
            # A refused schema version must not leave the connection (and its thread) open.
            await self.close()
            raise

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()

    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreError("store is not open")
        return self._db

    async def _check_version(self) -> int:
        version = int(await self._scalar("PRAGMA user_version"))
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"database {self.path} has schema version {version}, newer than this Bridge "
                f"understands ({SCHEMA_VERSION})",
                remedy="upgrade Bridge, or use another [storage] path",
            )
        return version

    async def _check_integrity(self) -> None:
        """Stop on a damaged file before anything writes to it: it must never be overwritten."""
        rows = await self._rows("PRAGMA integrity_check(5)")
        problems = [str(row[0]) for row in rows if row[0] != "ok"]
        if problems:
            raise StoreError(
                f"database {self.path} is damaged and was left untouched (integrity_check: "
                f"{'; '.join(problems)})",
                remedy="restore a backup (made with `bridge backup`), or move the file away to start "
                "with an empty database",
            )

    async def backup(self, target: Path) -> None:
        """An online, consistent copy of the whole database (SQLite's backup API) at `target`."""
        target = Path(target)
        if target.exists():
            raise StoreError(f"{target} already exists", remedy="choose a new file for the backup")
        copy = await _connect(target, "write")
        try:
            await self.db.backup(copy)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write {target}: {exc}") from None
        finally:
            await copy.close()

    async def _migrate(self) -> None:
        version = await self._check_version()
        for index in range(version, SCHEMA_VERSION):

            def migrate(conn: sqlite3.Connection, index: int = index) -> None:
                for statement in _statements(MIGRATIONS[index]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {index + 1}")

            await self._write(migrate)

    async def _write(self, work: Work[T]) -> T:
        """Run `work` as one transaction, in a single trip to the connection's thread.

        That thread runs queued work one item at a time, so no other statement can slip into the
        transaction and no lock is needed; one trip instead of one per statement is what keeps a
        turn's writes cheap (see bench/throughput.py). Once queued, the work runs to its end even if
        the awaiting task is cancelled: the caller may miss the result, the file never holds half.
        aiosqlite has no public call for "run this on your thread"; _execute is the one its own
        backup() and iterdump() use, and the version range in pyproject.toml is pinned.
        """
        db = self.db
        try:
            return await _on_thread(db, _atomically, db._conn, work)
        except sqlite3.OperationalError as exc:
            # Locked, full, read-only or gone: the store can't be used right now, whatever the caller.
            raise StoreError(f"database {self.path}: {exc}") from exc

    async def _read(self, work: Work[T], *, snapshot: bool = False) -> T:
        """Run reads in one trip to the connection's thread; with `snapshot`, all see one state."""
        db = self.db
        try:
            if snapshot:
                return await _on_thread(db, _snapshot, db._conn, work)
            return await _on_thread(db, work, db._conn)
        except sqlite3.OperationalError as exc:
            raise StoreError(f"database {self.path}: {exc}") from exc

    async def _scalar(self, sql: str, params: Iterable[Any] = ()) -> Any:
        rows = await self._rows(sql, params)
        return rows[0][0] if rows else None

    async def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        # One trip: execute, fetch and close together (a cursor would cost three).
        try:
            return list(await self.db.execute_fetchall(sql, tuple(params)))
        except sqlite3.OperationalError as exc:
            raise StoreError(f"database {self.path}: {exc}") from exc


_CHECK_PATH = "check the permissions of the folder and the free disk space"


async def _connect(path: Path, what: str) -> aiosqlite.Connection:
    """An aiosqlite connection to `path` (its folder made first); StoreError naming the path if not."""
    if str(path) != ":memory:":
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot {what} {path}: cannot create its folder ({exc.strerror})", remedy=_CHECK_PATH
            ) from None
    connecting = aiosqlite.connect(path, isolation_level=None)
    try:
        return await connecting
    except sqlite3.Error as exc:
        # aiosqlite has queued the stop of its thread; let it finish while this loop still runs, or
        # it reports "Event loop is closed" from that thread after our error is printed.
        await asyncio.to_thread(connecting._thread.join)
        raise StoreError(f"cannot {what} {path}: {exc}", remedy=_CHECK_PATH) from None


async def _on_thread(db: aiosqlite.Connection, fn: Callable[[*Ts], T], *args: *Ts) -> T:
    """`fn(*args)` on the connection's thread, with the types checked that _execute does not declare."""
    # _execute is private and unannotated, so mypy knows nothing of it (see SQLiteConnection._write
    # for why it is used at all): the ignore is for calling it, and `result` gets the type `fn` returns.
    result: T = await db._execute(fn, *args)  # type: ignore[no-untyped-call]
    return result


def _snapshot(conn: sqlite3.Connection, work: Work[T]) -> T:
    """On the connection's thread: the reads in one deferred transaction, so they agree with each other."""
    conn.execute("BEGIN")
    try:
        return work(conn)
    finally:
        conn.execute("COMMIT")


def _atomically(conn: sqlite3.Connection, work: Work[T]) -> T:
    """On the connection's thread: BEGIN IMMEDIATE, the work, then COMMIT (or ROLLBACK on any error)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = work(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result


def _statements(script: str) -> list[str]:
    """Split a migration into statements; sqlite3.complete_statement respects quotes and comments."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
