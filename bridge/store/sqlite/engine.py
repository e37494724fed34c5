"""The SQLite engine: writes committed together on the event loop, other reads on a thread of their own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bridge.errors import StoreError
from bridge.store.batch import Job, Mode, Outcome, resolve
from bridge.store.engine import Work
from bridge.store.sqlite.batch import CHECK_PATH, DatabaseThread, Trips, commit
from bridge.store.sqlite.migrations import MIGRATIONS, SCHEMA_VERSION

T = TypeVar("T")

log = logging.getLogger(__name__)

# The loop's connection never checkpoints (a checkpoint syncs the file to disk, which may take
# milliseconds): every this many of its commits, the writer thread checkpoints instead. About 1,000
# WAL pages, SQLite's own default, at a few pages a commit.
CHECKPOINT_EVERY = 250


class SQLiteEngine:
    """One SQLite file: writes on the event loop's own connection, most reads on a reader thread.

    A write is queued, and the writes queued during one pass of the event loop are committed
    together when it comes round (group commit): one transaction, each write in a savepoint of its
    own, one commit. A write that raises rolls back its own savepoint only. In WAL mode with
    synchronous=NORMAL a commit appends to the WAL without syncing it: 0.02-0.1 ms, less than one
    wake-up of another thread, and a second busy thread would only contend for the GIL. Measured
    with bench/throughput.py on a 2-core VM, against the same group commit on a writer thread: one
    chat 155-158 -> 238-243 turns/s, 100 chats 236-251 -> 298-378 (docs/performance.md).

    What could hold up the loop goes to the writer thread instead, in order with the rest:
    - a write lock another process holds: the loop's connection never waits for it (busy_timeout
      0); its writes go to the thread, which waits up to 5 s, and the writes queued after them wait
      on the loop until the thread is done with them, so none overtakes another;
    - checkpoints, which sync the file: the loop's connection never checkpoints, the thread does,
      every CHECKPOINT_EVERY commits;
    - writes the caller calls slow (pruning traces), and opening (the integrity check, migrations).

    Reads run on the reader thread (WAL lets it read beside the writes), but for `quick` ones: the
    indexed, bounded reads a run starts from, which are cheaper than the trip. A quick read first
    commits the writes queued before it, so it sees them. Work functions are plain sqlite3 code.

    aiosqlite is not used: it has no public way to run a function on its thread, and one statement
    per trip made a turn cost 8 trips of 0.1-0.3 ms each (dc72d25: 261 -> 528 turns/s at 100 chats).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.label = f"database {self.path}"
        # One writer at a time (the file's lock): ids are handed out, and committed, in order.
        self.ids_in_commit_order = True
        self._writer: DatabaseThread | None = None
        self._reader: DatabaseThread | None = None
        # The loop's connection, and the loop it belongs to (None for ":memory:", which is private to
        # one connection: there everything runs on the writer thread).
        self._conn: sqlite3.Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._batch: list[Job] = []
        self._flush_at: asyncio.Handle | None = None
        # Writes handed to the writer thread and not yet done: while there are any, the writes queued
        # after them wait, so none overtakes another.
        self._on_thread = 0
        self._commits_since_checkpoint = 0
        self.trips = Trips()

    async def open(self) -> None:
        if self._writer is not None:
            return
        in_memory = str(self.path) == ":memory:"
        if not in_memory:
            _make_folder(self.path, "open database")
        self._writer = DatabaseThread(f"bridge-db-writer {self.path}", self.label, self._connect, self.trips)
        try:
            await self._call(self._writer, "raw", self._prepare)
            if not in_memory:
                # An in-memory database is private to its connection: it is read where it is written.
                self._reader = DatabaseThread(
                    f"bridge-db-reader {self.path}", self.label, self._connect_reader, self.trips
                )
                await self._call(self._reader, "raw", lambda conn: None)
                self._conn = self._connect_loop()
                self._loop = asyncio.get_running_loop()
        except sqlite3.DatabaseError as exc:
            await self.close()
            raise StoreError(
                f"{self.label} is not usable: {exc}",
                remedy="check that [storage] path names a Bridge database, or move the file away",
            ) from None
        except BaseException:
            # A refused schema version must not leave the threads running.
            await self.close()
            raise

    async def close(self) -> None:
        # What was queued on the loop is written before anything closes.
        self._flush_now()
        conn, reader, writer = self._conn, self._reader, self._writer
        self._conn = self._loop = self._reader = self._writer = None
        # The reader first, then the loop's connection, and the writer's last: the last connection
        # to close checkpoints the WAL into the file and removes it, and that must be the writer's
        # (the reader may not write, the loop's must not sync).
        if reader is not None:
            reader.stop()
            await asyncio.to_thread(reader.join)
        if conn is not None:
            conn.close()
        if writer is not None:
            writer.stop()
            await asyncio.to_thread(writer.join)

    async def write(self, work: Work[T], *, slow: bool = False) -> T:
        self.trips.writes += 1
        loop = asyncio.get_running_loop()
        if slow:
            self._flush_now()  # what was queued before it is written before it
        if slow or self._conn is None or loop is not self._loop:
            return await self._to_writer(work)
        future: asyncio.Future[T] = loop.create_future()
        self._batch.append(Job(work, "write", future, loop))
        self._schedule_flush()
        return await self._outcome(future)

    async def read(self, work: Work[T], *, snapshot: bool = False, quick: bool = False) -> T:
        self.trips.reads += 1
        if (
            quick
            and self._conn is not None
            and not self._on_thread
            and asyncio.get_running_loop() is self._loop
        ):
            self._flush_now()
            if not self._on_thread:  # else the lock is held elsewhere: the flush went to the thread
                return self._read_here(self._conn, work, snapshot)
        thread = self._reader or self._open_writer()
        return await self._call(thread, "snapshot" if snapshot else "read", work)

    async def on_writer(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` on the connection writes are made on, outside any transaction (for tests and checks)."""
        self._flush_now()
        if self._conn is not None and not self._on_thread:
            return fn(self._conn)
        return await self._call(self._open_writer(), "raw", fn)

    async def backup(self, target: Path) -> None:
        """An online, consistent copy of the whole database (SQLite's backup API) at `target`."""
        target = Path(target)
        if target.exists():
            raise StoreError(f"{target} already exists", remedy="choose a new file for the backup")
        _make_folder(target, "write")

        def copy(conn: sqlite3.Connection) -> None:
            try:
                with contextlib.closing(sqlite3.connect(target)) as into:
                    conn.backup(into)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot write {target}: {exc}", remedy=CHECK_PATH) from None

        await self._call(self._reader or self._open_writer(), "raw", copy)

    async def claim(self, name: str, *, shared: bool = False) -> bool:
        # One process per file is not enforced here (the file's own locking keeps it consistent).
        return True

    async def holds(self, name: str) -> bool:
        return True

    def dropped(self, name: str) -> bool:
        return False

    # ---------------------------------------------------------------- on the loop

    def _flush(self) -> None:
        """Commit the writes queued on the loop, together; hand them to the writer thread when another
        process holds the write lock, rather than wait for it here."""
        self._flush_at = None
        if self._on_thread:
            return  # after the writes on the thread, not before them: _thread_write_done comes back
        batch, self._batch = self._batch, []
        if not batch:
            return
        conn = self._conn
        if conn is None:
            resolve([Outcome(job, error=StoreError("store is closed")) for job in batch])
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                resolve([Outcome(job, error=exc) for job in batch])
                return
            log.info("%s is locked by another process; writing on the writer thread meanwhile", self.label)
            writer = self._open_writer()
            for job in batch:
                self._hand_over(writer, job)
            return
        self.trips.commits += 1
        resolve(commit(conn, batch, begun=True))
        self._commits_since_checkpoint += 1
        if self._commits_since_checkpoint >= CHECKPOINT_EVERY and self._writer is not None:
            self._commits_since_checkpoint = 0
            loop = batch[0].loop
            ran: asyncio.Future[None] = loop.create_future()
            # Nobody waits for it; a checkpoint refused because the store closed is no error.
            ran.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._writer.submit(Job(_checkpoint, "raw", ran, loop))

    def _schedule_flush(self) -> None:
        if self._flush_at is None and not self._on_thread and self._loop is not None:
            self._flush_at = self._loop.call_soon(self._flush)

    def _flush_now(self) -> None:
        """Write what is queued on the loop now: here, or after the writes on the thread, there."""
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        if not self._on_thread:
            self._flush()
            return
        batch, self._batch = self._batch, []
        writer = self._open_writer()
        for job in batch:
            self._hand_over(writer, job)

    async def _to_writer(self, work: Work[T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._hand_over(self._open_writer(), Job(work, "write", future, loop))
        return await self._outcome(future)

    def _hand_over(self, writer: DatabaseThread, job: Job) -> None:
        self._on_thread += 1
        self.trips.thread_jobs += 1
        job.done = self._thread_write_done
        writer.submit(job)

    def _thread_write_done(self) -> None:
        self._on_thread -= 1
        if not self._on_thread and self._batch:
            # Writes queued on the loop meanwhile waited for these; they may go now.
            self._schedule_flush()

    def _read_here(self, conn: sqlite3.Connection, work: Work[T], snapshot: bool) -> T:
        try:
            if not snapshot:
                return work(conn)
            conn.execute("BEGIN")
            try:
                return work(conn)
            finally:
                conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{self.label}: {exc}") from exc

    async def _outcome(self, future: asyncio.Future[T]) -> T:
        try:
            return await future
        except sqlite3.OperationalError as exc:
            # Locked, full, read-only or gone: the store can't be used right now, whatever the caller.
            raise StoreError(f"{self.label}: {exc}") from exc

    # ---------------------------------------------------------------- on the threads

    def _connect(self) -> sqlite3.Connection:
        # Autocommit: the engine writes BEGIN and COMMIT itself.
        return sqlite3.connect(self.path, isolation_level=None)

    def _connect_loop(self) -> sqlite3.Connection:
        conn = self._connect()
        conn.execute("PRAGMA foreign_keys = ON")
        # Per connection, as _prepare sets it for the writer's: a commit appends to the WAL, unsynced.
        conn.execute("PRAGMA synchronous = NORMAL")
        # Never wait on the loop: a lock held elsewhere sends the writes to the writer thread.
        conn.execute("PRAGMA busy_timeout = 0")
        # Never sync on the loop either: the writer thread checkpoints (see CHECKPOINT_EVERY).
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        return conn

    def _connect_reader(self) -> sqlite3.Connection:
        conn = self._connect()
        conn.execute("PRAGMA busy_timeout = 5000")
        # Reads only: a work function that writes by mistake fails here instead of racing the writer.
        conn.execute("PRAGMA query_only = ON")
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Check the version and integrity before anything writes, then set up and migrate."""
        # Refuse a newer schema before touching the file (journal_mode would rewrite its header).
        version = self._check_version(conn)
        try:
            problems = [str(row[0]) for row in conn.execute("PRAGMA integrity_check(5)") if row[0] != "ok"]
        except sqlite3.DatabaseError as exc:
            # Damage the check cannot even walk past (a page it needs is garbage) is damage too.
            problems = [str(exc)]
        if problems:
            # A damaged file must never be overwritten.
            raise StoreError(
                f"{self.label} is damaged and was left untouched (integrity_check: {'; '.join(problems)})",
                remedy="restore a backup (made with `bridge backup`), or move the file away to start "
                "with an empty database",
            )
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        # NORMAL in WAL mode survives a process crash; only an OS crash can lose the last commit.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA busy_timeout = 5000")
        for index in range(version, SCHEMA_VERSION):
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _statements(MIGRATIONS[index]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {index + 1}")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _check_version(self, conn: sqlite3.Connection) -> int:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.label} has schema version {version}, newer than this Bridge understands "
                f"({SCHEMA_VERSION})",
                remedy="upgrade Bridge, or use another [storage] path",
            )
        return version

    # ---------------------------------------------------------------- plumbing

    def _open_writer(self) -> DatabaseThread:
        if self._writer is None:
            raise StoreError("store is not open")
        return self._writer

    async def _call(self, thread: DatabaseThread, mode: Mode, fn: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self.trips.thread_jobs += 1
        thread.submit(Job(fn, mode, future, loop))
        return await self._outcome(future)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether another connection holds the lock (SQLITE_BUSY or SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _checkpoint(conn: sqlite3.Connection) -> None:
    """Copy the WAL into the file without waiting for readers or writers, on the writer thread."""
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    except sqlite3.Error as exc:  # the next one will do; nothing is lost by a checkpoint left out
        log.warning("checkpointing the database failed: %s", exc)


def _make_folder(path: Path, what: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot {what} {path}: cannot create its folder ({exc.strerror})", remedy=CHECK_PATH
        ) from None


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
