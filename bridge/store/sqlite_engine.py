"""The SQLite engine: a writer thread that commits concurrent writes together, and a reader thread."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from bridge.errors import StoreError
from bridge.store.engine import Work
from bridge.store.migrations import MIGRATIONS, SCHEMA_VERSION

T = TypeVar("T")

# How many queued writes one transaction may carry. Each is a savepoint; the commit is shared.
BATCH_LIMIT = 256

_CHECK_PATH = "check the permissions of the folder and the free disk space"

Mode = Literal["raw", "write", "read", "snapshot"]


@dataclass(slots=True)
class _Job:
    fn: Callable[[sqlite3.Connection], Any]
    mode: Mode
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop = field(repr=False)


@dataclass(slots=True)
class _Outcome:
    job: _Job
    value: Any = None
    error: BaseException | None = None


class SQLiteEngine:
    """One SQLite file: writes on one thread, reads on another (WAL lets them run side by side).

    Writes are queued; the writer takes every write waiting when it comes free and runs them in one
    transaction, each in a savepoint of its own, with one commit (group commit). A write that raises
    rolls back its own savepoint only. So a busy bot pays one commit, and one trip between threads,
    for many runs' writes: see bench/throughput.py for the figures. Work functions are plain
    sqlite3 code, so no call is made on a thread that does not own the connection.

    aiosqlite is not used: it has no public way to run a function on its thread, and one statement
    per trip is what made a turn cost 8 trips before.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.label = f"database {self.path}"
        # One writer at a time (the file's lock): ids are handed out, and committed, in order.
        self.ids_in_commit_order = True
        self._writer: _DatabaseThread | None = None
        self._reader: _DatabaseThread | None = None

    async def open(self) -> None:
        if self._writer is not None:
            return
        if str(self.path) != ":memory:":
            _make_folder(self.path, "open database")
        self._writer = _DatabaseThread(f"bridge-db-writer {self.path}", self.label, self._connect)
        try:
            await self._call(self._writer, "raw", self._prepare)
            if str(self.path) != ":memory:":
                # An in-memory database is private to its connection: it is read where it is written.
                self._reader = _DatabaseThread(
                    f"bridge-db-reader {self.path}", self.label, self._connect_reader
                )
                await self._call(self._reader, "raw", lambda conn: None)
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
        threads = [t for t in (self._reader, self._writer) if t is not None]
        self._writer = self._reader = None
        # The reader first, and wholly: the last connection to close checkpoints the WAL into the
        # file and removes it, and that must be the writer (the reader may not write).
        for thread in threads:
            thread.stop()
            await asyncio.to_thread(thread.join)

    async def write(self, work: Work[T]) -> T:
        return await self._call(self._open_writer(), "write", work)

    async def read(self, work: Work[T], *, snapshot: bool = False) -> T:
        thread = self._reader or self._open_writer()
        return await self._call(thread, "snapshot" if snapshot else "read", work)

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
                raise StoreError(f"cannot write {target}: {exc}", remedy=_CHECK_PATH) from None

        await self._call(self._reader or self._open_writer(), "raw", copy)

    async def claim(self, name: str, *, shared: bool = False) -> bool:
        # One process per file is not enforced here (the file's own locking keeps it consistent).
        return True

    async def holds(self, name: str) -> bool:
        return True

    # ---------------------------------------------------------------- on the threads

    def _connect(self) -> sqlite3.Connection:
        # Autocommit: the engine writes BEGIN and COMMIT itself.
        return sqlite3.connect(self.path, isolation_level=None)

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

    def _open_writer(self) -> _DatabaseThread:
        if self._writer is None:
            raise StoreError("store is not open")
        return self._writer

    async def _call(self, thread: _DatabaseThread, mode: Mode, fn: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        thread.submit(_Job(fn, mode, future, loop))
        try:
            return await future
        except sqlite3.OperationalError as exc:
            # Locked, full, read-only or gone: the store can't be used right now, whatever the caller.
            raise StoreError(f"{self.label}: {exc}") from exc


class _DatabaseThread(threading.Thread):
    """A thread that owns one connection and runs queued jobs on it; writes waiting together share
    one transaction."""

    def __init__(self, name: str, label: str, connect: Callable[[], sqlite3.Connection]) -> None:
        # A daemon, so a store nobody closed cannot hold the process open; SQLite survives the cut.
        super().__init__(name=name, daemon=True)
        self._connect = connect
        self._label = label
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.start()

    def submit(self, job: _Job) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        self._jobs.put(None)

    def run(self) -> None:
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            self._refuse_rest(StoreError(f"cannot open {self._label}: {exc}", remedy=_CHECK_PATH), wait=True)
            return
        try:
            self._serve(conn)
        finally:
            conn.close()
            # A job queued while the store was closing would otherwise wait for ever.
            self._refuse_rest(StoreError("store is closed"), wait=False)

    def _serve(self, conn: sqlite3.Connection) -> None:
        waiting: _Job | None = None
        while True:
            job = waiting if waiting is not None else self._jobs.get()
            waiting = None
            if job is None:
                return
            if job.mode != "write":
                _settle([_run_one(conn, job)])
                continue
            batch, stopping = [job], False
            while len(batch) < BATCH_LIMIT:
                try:
                    queued = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if queued is not None and queued.mode == "write":
                    batch.append(queued)
                    continue
                waiting, stopping = queued, queued is None
                break
            _settle(_commit(conn, batch))
            if stopping:
                return

    def _refuse_rest(self, error: StoreError, *, wait: bool) -> None:
        """Fail queued jobs: until the stop sentinel (`wait`), or those already queued."""
        while True:
            try:
                job = self._jobs.get() if wait else self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is None:
                wait = False
                continue
            _settle([_Outcome(job, error=error)])


def _run_one(conn: sqlite3.Connection, job: _Job) -> _Outcome:
    try:
        if job.mode == "snapshot":
            # One deferred transaction, so the reads agree with each other.
            conn.execute("BEGIN")
            try:
                return _Outcome(job, job.fn(conn))
            finally:
                conn.execute("COMMIT")
        return _Outcome(job, job.fn(conn))
    except BaseException as exc:
        return _Outcome(job, error=exc)


def _commit(conn: sqlite3.Connection, batch: list[_Job]) -> list[_Outcome]:
    """Run `batch` as one transaction, each job in its own savepoint, with one commit. When the
    database itself fails (locked, full), each job is run again alone, so one job's trouble (a
    write too big for the disk) does not fail the others."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        return [_Outcome(job, error=exc) for job in batch]
    if len(batch) == 1:
        job = batch[0]
        try:
            value = job.fn(conn)
            conn.execute("COMMIT")
        except BaseException as exc:
            _rollback(conn)
            return [_Outcome(job, error=exc)]
        return [_Outcome(job, value)]
    outcomes: list[_Outcome] = []
    try:
        for job in batch:
            outcomes.append(_in_savepoint(conn, job))
        conn.execute("COMMIT")
    except sqlite3.OperationalError:
        _rollback(conn)
        return [outcome for job in batch for outcome in _commit(conn, [job])]
    return outcomes


def _in_savepoint(conn: sqlite3.Connection, job: _Job) -> _Outcome:
    conn.execute("SAVEPOINT job")
    try:
        value = job.fn(conn)
    except sqlite3.OperationalError:
        raise
    except BaseException as exc:
        conn.execute("ROLLBACK TO job")
        conn.execute("RELEASE job")
        return _Outcome(job, error=exc)
    conn.execute("RELEASE job")
    return _Outcome(job, value)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _settle(outcomes: list[_Outcome]) -> None:
    """Hand results back to their loops: one wake-up per loop for the whole batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome.job.loop, []).append(outcome)
    for loop, done in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop closed while the job ran
            loop.call_soon_threadsafe(_resolve, done)


def _resolve(outcomes: list[_Outcome]) -> None:
    for outcome in outcomes:
        future = outcome.job.future
        if future.done():  # the caller was cancelled; the work itself still ran to its end
            continue
        if outcome.error is not None:
            future.set_exception(outcome.error)
        else:
            future.set_result(outcome.value)


def _make_folder(path: Path, what: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot {what} {path}: cannot create its folder ({exc.strerror})", remedy=_CHECK_PATH
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
