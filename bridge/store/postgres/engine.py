"""The PostgreSQL store: the same table code as SQLite's, on psycopg 3 connections from its pool.

Why psycopg 3, used through its blocking API on a pool of threads, rather than asyncpg: the tables
are written once, as plain functions of a DB-API connection that each run as one transaction
(engine.py). psycopg's connections have that API, the one sqlite3 has, so the same functions run
on both backends unchanged, and a transaction once started runs to its end even if the task
awaiting it is cancelled (the SQLite engine promises the same). asyncpg has only an async API,
which would mean a second copy of every table's code. The pool is psycopg_pool's.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import select
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from bridge.config.base import mask_url
from bridge.errors import StoreError, first_line
from bridge.store.batch import Job, JobThread, Outcome, settle
from bridge.store.engine import Conn, Work
from bridge.store.postgres.dialect import PgConn
from bridge.store.postgres.migrations import PG_MIGRATIONS

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

T = TypeVar("T")

SCHEMA_VERSION = len(PG_MIGRATIONS)
# Transactions that deadlock (or fail to serialize, in a snapshot read) are run again; past this
# many tries the error stands.
MAX_TRIES = 20
# Dead pooled connections replaced in one call (a restarted server leaves every one of them dead).
MAX_RECONNECTS = 20
# How long taking a claim may wait for a connection (a worker checking its claim must not hang).
CLAIM_TIMEOUT_S = 2
# How long `bridge run` waits for the server at start before it says it cannot connect.
OPEN_TIMEOUT_S = 10.0
# How many queued writes one transaction may carry (see Writer).
BATCH_LIMIT = 64
# Threads for the reads (and slow writes, claims): at most this many, whatever the pool's size. Each
# runs psycopg's Python under the GIL, so more of them only contend for it: with 100 chats at once,
# 10 threads cost a turn about 1 ms more CPU than 3 did (docs/performance.md), most of it outside
# Python, in handing the GIL over. A read waiting on a slow server or query holds a thread, not the
# loop, and the writer has its own.
READ_THREADS = 4
# Any fixed number: the advisory lock that lets one worker at a time migrate the schema.
_MIGRATE_LOCK = 0x42_52_49_44_47_45  # "BRIDGE"

_CHECK_SERVER = (
    "check [storage] url (user, host, port and database), that the server is running, and that "
    "the user may connect"
)


class PostgresEngine:
    """A psycopg connection pool. Writes run on the Writer's one thread, committed together; reads,
    slow writes and the migration run on the pool's threads, each with a connection.

    Writes run READ COMMITTED. What two writers could race on is decided by the database itself:
    one active session per key and one row per platform message are unique indexes the inserts
    name in ON CONFLICT, and one run per session at a time is the dispatcher's (and, across
    processes, the worker claim's). SERIALIZABLE was tried: with 100 chats at once its predicate
    locks failed most transactions, twenty times over. A deadlock is still run again from the start
    (the functions have no effects outside the database). Snapshot reads run REPEATABLE READ.
    """

    def __init__(self, url: str, *, pool_size: int = 10, application_name: str = "bridge") -> None:
        self.url = url
        # Every connection this engine opens says it, in pg_stat_activity: a worker's are
        # `bridge-<worker id>-pool` and `-claim`, so that the others can end them all should it go
        # silent (WorkerTable.end_worker_connections).
        self.application_name = application_name
        self.label = f"database {mask_url(url)}"
        # Transactions that run side by side may commit a larger identity before a smaller one.
        self.ids_in_commit_order = False
        self.pool_size = pool_size
        self._pool: ConnectionPool | None = None
        self._threads: ThreadPoolExecutor | None = None
        # Connections that hold session-level advisory locks (claim): closing one releases its lock.
        self._held: dict[str, psycopg.Connection[Any]] = {}
        self._writer: Writer | None = None

    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            from psycopg_pool import ConnectionPool, PoolTimeout
        except ImportError:
            raise StoreError(
                "[storage] url names a PostgreSQL server, but psycopg is not installed",
                remedy="install Bridge with its PostgreSQL extra: pip install 'bridge[postgresql]'",
            ) from None

        self._threads = ThreadPoolExecutor(min(self.pool_size, READ_THREADS), thread_name_prefix="bridge-pg")
        # autocommit: the engine writes BEGIN and COMMIT itself, as the SQLite engine does.
        pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=self.pool_size,
            open=False,
            kwargs={"autocommit": True, "application_name": f"{self.application_name}-pool"},
        )
        try:
            await self._on_thread(lambda: pool.open(wait=True, timeout=OPEN_TIMEOUT_S))
        except PoolTimeout:
            # Its workers would go on trying to connect in the background.
            await self._on_thread(lambda: pool.close(timeout=0))
            await self._stop_threads()
            raise StoreError(f"cannot connect to {self.label}", remedy=_CHECK_SERVER) from None
        self._pool = pool
        try:
            await self._run(self._migrate, begin="BEGIN")
        except BaseException:
            await self.close()
            raise
        self._writer = Writer(pool, self.label)

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            # What was queued before is written first: the writer stops at the sentinel.
            writer.stop()
            await asyncio.to_thread(writer.join)
        held, self._held = self._held, {}
        for conn in held.values():
            await self._on_thread(conn.close)
        pool, self._pool = self._pool, None
        if pool is not None:
            await self._on_thread(pool.close)
        await self._stop_threads()

    async def write(self, work: Work[T], *, slow: bool = False) -> T:
        if slow or self._writer is None:
            # A sweep over many rows would hold up every write queued behind it: on the pool.
            return await self._run(work, begin="BEGIN")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._writer.submit(Job(work, "write", future, loop))
        return await future

    async def read(self, work: Work[T], *, snapshot: bool = False, quick: bool = False) -> T:
        # Every read is a round trip to the server anyway: `quick` changes nothing here.
        return await self._run(work, begin=None, snapshot=snapshot)

    async def claim(self, name: str, *, shared: bool = False) -> bool:
        """A session-level advisory lock on a connection of its own, outside the pool: the server
        drops it the moment that connection ends, a killed process's included."""
        import psycopg

        def take() -> bool:
            if name in self._held:
                return True
            conn = psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=CLAIM_TIMEOUT_S,
                application_name=f"{self.application_name}-claim",
            )
            try:
                function = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
                row = conn.execute(f"SELECT {function}(hashtextextended(%s, 0))".encode(), (name,)).fetchone()
            except BaseException:
                conn.close()
                raise
            if row is not None and row[0]:
                self._held[name] = conn
                return True
            conn.close()
            return False

        try:
            return await self._on_thread(take)
        except psycopg.OperationalError as exc:
            raise StoreError(f"{self.label}: {first_line(exc)}", remedy=_CHECK_SERVER) from exc

    async def holds(self, name: str) -> bool:
        """Whether the connection holding `name` is still up (so the server still holds the lock)."""
        import psycopg

        conn = self._held.get(name)
        if conn is None:
            return False

        def ping() -> bool:
            try:
                conn.execute("SELECT 1")
                return True
            except psycopg.Error:
                # The server dropped it (restart, network): the lock went with it.
                self._held.pop(name, None)
                conn.close()
                return False

        return await self._on_thread(ping)

    def dropped(self, name: str) -> bool:
        """Whether the connection holding `name` has something to read while nothing was asked on it:
        the server's notice that it ended the connection, or the connection's end. A look at the
        socket, no round trip. Not held (any more): True."""
        conn = self._held.get(name)
        if conn is None or conn.closed:
            return True
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    async def backup(self, target: Path) -> None:
        raise StoreError(
            f"`bridge backup` copies SQLite files; {self.label} is PostgreSQL",
            remedy="use pg_dump (for example `pg_dump -Fc -f bridge.dump DBNAME`), which makes a "
            "consistent copy while workers keep writing",
        )

    # ---------------------------------------------------------------- on the pool's threads

    async def _run(self, work: Work[T], *, begin: str | None, snapshot: bool = False) -> T:
        """`work` on a pool thread: as a transaction `begin` starts, or in autocommit with None; with
        `snapshot`, as a read-only snapshot (_snapshot) whatever `begin` says."""
        import psycopg

        if self._pool is None:
            raise StoreError("store is not open")
        pool = self._pool
        try:
            if snapshot:
                return await self._on_thread(lambda: _snapshot(pool, work))
            return await self._on_thread(lambda: _transaction(pool, work, begin))
        except (psycopg.OperationalError, psycopg.errors.QueryCanceled) as exc:
            raise _server_error(self.label, exc) from exc

    def _migrate(self, conn: Conn) -> None:
        """Bring the schema to SCHEMA_VERSION under an advisory lock, so workers starting together
        migrate it once; refuse a newer one."""
        conn.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATE_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS bridge_schema (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM bridge_schema").fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.label} has schema version {version}, newer than this Bridge understands "
                f"({SCHEMA_VERSION})",
                remedy="upgrade Bridge (every worker), or use another [storage] url",
            )
        for index in range(version, SCHEMA_VERSION):
            cast(PgConn, conn).raw(PG_MIGRATIONS[index])
        if row is None:
            conn.execute("INSERT INTO bridge_schema (version) VALUES (?)", (SCHEMA_VERSION,))
        elif version < SCHEMA_VERSION:
            conn.execute("UPDATE bridge_schema SET version = ?", (SCHEMA_VERSION,))

    async def _on_thread(self, fn: Callable[[], T]) -> T:
        if self._threads is None:
            raise StoreError("store is not open")
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn)

    async def _stop_threads(self) -> None:
        threads, self._threads = self._threads, None
        if threads is not None:
            await asyncio.to_thread(threads.shutdown, wait=True)


def _transaction(pool: ConnectionPool, work: Work[T], begin: str | None) -> T:
    """`work` as one transaction (or, with no `begin`, statements in autocommit), run again when it
    deadlocks with another, or when the pooled connection turns out to be
    dead before anything was sent on it (the server restarted): the pool then gives a new one."""
    import psycopg.errors

    attempt = reconnects = 0
    while True:
        attempt += 1
        with pool.connection() as conn:
            wrapped = PgConn(conn)
            try:
                if begin is None:
                    # Reads only (autocommit): safe to run again on a new connection.
                    return work(wrapped)
                conn.execute(begin)
            except psycopg.OperationalError:
                if conn.broken and reconnects < MAX_RECONNECTS:
                    reconnects += 1
                    continue
                raise
            try:
                try:
                    result = work(wrapped)
                except psycopg.OperationalError:
                    # The connection died before COMMIT: the server dropped the transaction whole.
                    if conn.broken and reconnects < MAX_RECONNECTS:
                        reconnects += 1
                        continue
                    raise
                # A failure from here on may have committed: it is never run again.
                conn.execute("COMMIT")
                return result
            except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected):
                conn.execute("ROLLBACK")
                if attempt >= MAX_TRIES:
                    raise
            except BaseException:
                if not conn.closed:
                    conn.execute("ROLLBACK")
                raise
        # Jittered, growing waits: two transactions that collided must not collide again in step.
        time.sleep(random.uniform(0, 0.002 * attempt))


def _snapshot(pool: ConnectionPool, work: Work[T]) -> T:
    """`work` as a read-only REPEATABLE READ transaction, in psycopg's pipeline mode: statements are
    sent without waiting for the results of those before them, which come back together when one is
    read. BEGIN goes with the first statement, and a work that sends all its statements before it
    reads any (a run's context, runs.py) is one round trip, then COMMIT's: 2 where it was 8.

    Run again on a new connection when the pooled one turns out to be dead (the server restarted):
    a read is safe to repeat."""
    import psycopg

    reconnects = 0
    while True:
        with pool.connection() as conn:
            try:
                with _pipelined(conn) as pipeline:
                    conn.execute(b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    result = work(PgConn(conn, pipeline))
                    conn.execute(b"COMMIT")
                return result
            except psycopg.OperationalError:
                if conn.broken and reconnects < MAX_RECONNECTS:
                    reconnects += 1
                    continue
                raise
            finally:
                _roll_back(conn)


class Writer(JobThread):
    """The engine's writes, on one thread: those queued while a transaction runs are committed
    together in the next one, as SQLite's engine does, so a loop pass's writes cost one BEGIN and one
    COMMIT rather than one of each apiece, and one thread rather than ten contend for the GIL. The
    transaction runs in pipeline mode (_together): its round trips are the results its writes read.

    No savepoints (each would be a round trip of its own): when any write of a batch fails, the batch
    is rolled back and each of its writes run again alone (the tables' writes have no effects outside
    the database, as the deadlock retry already relies on), so one write's error never fails another.
    A failure at COMMIT may have committed, so it is every write's error and none is run again.
    """

    def __init__(self, pool: ConnectionPool, label: str) -> None:
        super().__init__("bridge-pg-writer")
        self._pool = pool
        self._label = label
        self.start()

    def run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            batch, _, stopping = self._batch(job, BATCH_LIMIT)
            settle(self._commit(batch))
            if stopping:
                return

    def _commit(self, batch: list[Job]) -> list[Outcome]:
        # A batch of one too: in pipeline mode its transaction takes fewer round trips than alone.
        try:
            with self._pool.connection() as conn:
                together = _together(conn, batch)
        except Exception:  # no connection: each job, run alone, says why
            together = None
        if together is not None:
            return [self._mapped(outcome) for outcome in together]
        return [self._alone(job) for job in batch]

    def _alone(self, job: Job) -> Outcome:
        try:
            return Outcome(job, _transaction(self._pool, job.fn, "BEGIN"))
        except BaseException as exc:  # handed to the caller, on its loop
            return self._mapped(Outcome(job, error=exc))

    def _mapped(self, outcome: Outcome) -> Outcome:
        import psycopg

        exc = outcome.error
        if isinstance(exc, psycopg.OperationalError | psycopg.errors.QueryCanceled):
            error = _server_error(self._label, exc)
            error.__cause__ = exc
            return Outcome(outcome.job, error=error)
        return outcome


def _together(conn: psycopg.Connection[Any], batch: list[Job]) -> list[Outcome] | None:
    """`batch` as one transaction on `conn`, in psycopg's pipeline mode: each job's outcome, or None
    when one failed before COMMIT (rolled back: run them again alone).

    In pipeline mode a statement is sent without waiting for the answers to those before it: BEGIN
    goes out with the first statement whose result a job reads, and the statements after the last
    such read go out with COMMIT. So a batch whose writes read nothing back (delivery marks) is one
    round trip, and any other is one per result its writes read, plus COMMIT's.

    A failed statement aborts what was sent after it, and its error surfaces where the next result
    is read, which may be another job's: the batch is then run again alone, as for any failure, and
    each job's error is its own again. Once COMMIT was sent, a connection that dies before its answer
    came may have committed: every job gets the error and none is run again, as when COMMIT alone
    failed before."""
    committing = False
    try:
        with _pipelined(conn) as pipeline:
            conn.execute(b"BEGIN")
            wrapped = PgConn(conn, pipeline)
            values = [job.fn(wrapped) for job in batch]
            committing = True
            conn.execute(b"COMMIT")
    except Exception as exc:
        if committing and conn.broken:
            return [Outcome(job, error=exc) for job in batch]
        _roll_back(conn)
        return None
    return [Outcome(job, value) for job, value in zip(batch, values, strict=True)]


@contextlib.contextmanager
def _pipelined(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Pipeline]:
    """`conn` in pipeline mode for the block. When the block fails, what it left in flight is
    collected before the pipeline ends, so it ends quietly (psycopg logs a warning for each error it
    meets on the way out), and the block's error is raised."""
    import psycopg

    with conn.pipeline() as pipeline:
        try:
            yield pipeline
        except BaseException:
            if not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    pipeline.sync()
            raise


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End the transaction a failure left open (and aborted, after a failed statement). Called once
    out of the pipeline: in it, a ROLLBACK after a failure is refused too. A broken connection has
    none left (the server dropped it), and the pool replaces it."""
    import psycopg

    if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        with contextlib.suppress(psycopg.Error):
            conn.execute(b"ROLLBACK")


def _server_error(label: str, exc: BaseException) -> StoreError:
    # The server is gone, refused us or ran out of something: not the caller's fault.
    return StoreError(f"{label}: {first_line(exc)}", remedy=_CHECK_SERVER)
