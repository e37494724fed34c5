"""The SQLite connection under the store: open, integrity and version checks, migrations, transactions."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from bridge.store.base import StoreError
from bridge.store.migrations import MIGRATIONS, SCHEMA_VERSION


class SQLiteConnection:
    """One aiosqlite connection; writes are serialised so transactions never interleave."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._db: aiosqlite.Connection | None = None
        # One connection is shared by every task: a write lock keeps one task's statements out of
        # another task's open transaction.
        self._write = asyncio.Lock()

    async def open(self) -> None:
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            db = await aiosqlite.connect(self.path, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from None
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
            raise StoreError(f"database {self.path} is not usable: {exc}") from None
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
                f"understands ({SCHEMA_VERSION}); upgrade Bridge or use another [storage] path"
            )
        return version

    async def _check_integrity(self) -> None:
        """Stop on a damaged file before anything writes to it: it must never be overwritten."""
        rows = await self._rows("PRAGMA integrity_check(5)")
        problems = [str(row[0]) for row in rows if row[0] != "ok"]
        if problems:
            raise StoreError(
                f"database {self.path} is damaged and was left untouched (integrity_check: "
                f"{'; '.join(problems)}). Restore a backup (made with `bridge backup`), or move the "
                "file away to start with an empty database."
            )

    async def backup(self, target: Path) -> None:
        """An online, consistent copy of the whole database (SQLite's backup API) at `target`."""
        target = Path(target)
        if target.exists():
            raise StoreError(f"{target} already exists; choose a new file for the backup")
        target.parent.mkdir(parents=True, exist_ok=True)
        async with aiosqlite.connect(target) as copy:
            await self.db.backup(copy)

    async def _migrate(self) -> None:
        version = await self._check_version()
        for index in range(version, SCHEMA_VERSION):
            async with self._transaction() as db:
                for statement in _statements(MIGRATIONS[index]):
                    await db.execute(statement)
                await db.execute(f"PRAGMA user_version = {index + 1}")

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._write:
            db = self.db
            try:
                await _settled(db, "BEGIN IMMEDIATE")
            except asyncio.CancelledError:
                # Cancelled (a /clear, a shutdown) while BEGIN ran: never leave it open behind us.
                if db.in_transaction:
                    await _settled(db, "ROLLBACK")
                raise
            try:
                yield db
            except BaseException:
                await _settled(db, "ROLLBACK")
                raise
            await _settled(db, "COMMIT")

    async def _scalar(self, sql: str, params: Iterable[Any] = ()) -> Any:
        async with self.db.execute(sql, tuple(params)) as cur:
            row = await cur.fetchone()
        return None if row is None else row[0]

    async def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        async with self.db.execute(sql, tuple(params)) as cur:
            return list(await cur.fetchall())


async def _settled(db: aiosqlite.Connection, sql: str) -> None:
    """Run a transaction statement to its end even if the caller is cancelled meanwhile.

    The statement runs on aiosqlite's thread whatever happens to the awaiting task; waiting for it
    keeps the connection's transaction state known when the cancellation is passed on.
    """
    task = asyncio.ensure_future(db.execute(sql))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


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
