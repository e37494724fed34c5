"""A worker's own PostgreSQL connections: one holds its leases (advisory locks), one hears new messages."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from bridge.errors import StoreError
from bridge.store.engine import Conn
from bridge.store.intake import INTAKE_CHANNEL
from bridge.store.postgres.dialect import PgConn

if TYPE_CHECKING:
    import psycopg

T = TypeVar("T")

# The channel a worker asks on for a chat's run to be stopped, wherever it runs (/stop, /clear).
STOP_CHANNEL = "bridge_stop"
# The channel a trigger notifies with a chat's key when its /send, /model, route or session changed.
SESSION_CHANNEL = "bridge_session"
# Not the database's channels: the listener's own news, that it now listens (having connected, or
# connected again: what was notified before may have been missed), or that it no longer does.
LISTENING = "bridge_listening"
NOT_LISTENING = "bridge_not_listening"
# How long one wait for a notification lasts, so a stopping worker is never held up longer.
LISTEN_WAIT_S = 1.0
CONNECT_TIMEOUT_S = 5


class LeasesLost(StoreError):
    """The lease connection ended: the server released every lock it held, so runs in flight may no
    longer be this worker's alone."""


def lock_sql(name: str) -> tuple[str, tuple[str]]:
    return "SELECT pg_try_advisory_lock(hashtextextended(?, 0))", (name,)


class PgLeases:
    """Session-level advisory locks on a connection of this worker's own, outside the pool.

    The server drops them all the moment the connection ends, a killed worker's included, so a lease
    is never left behind. Each call runs on one thread of its own, in order: a transaction on the
    connection is never interleaved with another call. `run` wraps work in a transaction whose locks
    outlive it (session-level); `lock`, `unlock` and `is_free` take one name, `free` several.
    """

    def __init__(self, url: str, label: str, *, application_name: str) -> None:
        self.url = url
        self.label = label
        self.application_name = application_name
        self._conn: psycopg.Connection[Any] | None = None
        self._listener: psycopg.Connection[Any] | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="bridge-leases")
        self._listen_thread = ThreadPoolExecutor(1, thread_name_prefix="bridge-listen")
        self.lost = False

    async def open(self) -> None:
        import psycopg

        def connect() -> psycopg.Connection[Any]:
            return psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name=self.application_name,
            )

        try:
            self._conn = await self._on(self._thread, connect)
        except psycopg.OperationalError as exc:
            raise StoreError(f"{self.label}: cannot open the lease connection: {exc}") from exc

    async def reopen(self) -> None:
        """A new lease connection in place of one that failed (it holds nothing yet)."""
        old, self._conn = self._conn, None
        if old is not None:
            with contextlib.suppress(Exception):
                await self._on(self._thread, old.close)
        await self.open()
        self.lost = False

    async def close(self) -> None:
        for conn, thread in ((self._conn, self._thread), (self._listener, self._listen_thread)):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await self._on(thread, conn.close)
        self._conn = self._listener = None
        for thread in (self._thread, self._listen_thread):
            await asyncio.to_thread(thread.shutdown, wait=True)

    async def run(self, work: Callable[[Conn], T]) -> T:
        """`work` on the lease connection, each statement committed as it ends (the connection is in
        autocommit): the locks it takes stay held. No BEGIN and COMMIT around them: every use is one
        statement (a claim, a lock), or one followed by a notification that is meant to go out once
        the first has committed, and they were two round trips of each claim and each lease let go."""
        conn = self._live()
        return await self._call(lambda: work(PgConn(conn)))

    async def lock(self, name: str) -> bool:
        """Take `name` if it is free (True), or if this worker holds it already (counted twice then)."""
        return await self.run(lambda conn: bool(conn.execute(*lock_sql(name)).fetchone()[0]))

    async def unlock(self, name: str) -> None:
        await self.run(
            lambda conn: conn.execute("SELECT pg_advisory_unlock(hashtextextended(?, 0))", (name,))
        )

    async def is_free(self, name: str) -> bool:
        """Whether no connection holds `name` (tried and given back at once)."""
        return name in await self.free([name])

    async def free(self, names: Iterable[str]) -> set[str]:
        """Those of `names` no connection holds, in one call: each tried and given back at once. A
        worker's sweep asks this every second of every other worker's own lock, which one call a
        name made a trip to the lease thread per worker, every second, in every worker."""
        wanted = sorted(set(names))
        if not wanted:
            return set()

        def probe(conn: Conn) -> set[str]:
            taken = [
                name
                for (name,) in conn.execute(
                    "SELECT name FROM unnest(?::text[]) AS name "
                    "WHERE pg_try_advisory_lock(hashtextextended(name, 0))",
                    (wanted,),
                ).fetchall()
            ]
            if taken:
                conn.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(name, 0)) FROM unnest(?::text[]) AS name",
                    (taken,),
                )
            return set(taken)

        return await self.run(probe)

    async def notified(self) -> list[tuple[str, str]]:
        """Wait up to LISTEN_WAIT_S for news from any worker: (channel, payload) of a message queued
        (INTAKE_CHANNEL), a chat to stop (STOP_CHANNEL) or a chat's row changed (SESSION_CHANNEL);
        empty if none came. (LISTENING, "") once it listens, first and after each new connection;
        (NOT_LISTENING, "") once that connection failed."""
        import psycopg

        def wait() -> list[tuple[str, str]]:
            try:
                if self._listener is None:
                    self._listener = psycopg.connect(
                        self.url,
                        autocommit=True,
                        connect_timeout=CONNECT_TIMEOUT_S,
                        application_name=f"{self.application_name}-listen",
                    )
                    channels = (INTAKE_CHANNEL, STOP_CHANNEL, SESSION_CHANNEL)
                    self._listener.execute("; ".join(f"LISTEN {name}" for name in channels).encode())
                    return [(LISTENING, "")]
                found = self._listener.notifies(timeout=LISTEN_WAIT_S, stop_after=1)
                return [(note.channel, note.payload) for note in found]
            except (psycopg.OperationalError, psycopg.InterfaceError):
                # A restarted server: connect again next time; the workers' polling covers the gap.
                if self._listener is not None:
                    with contextlib.suppress(Exception):
                        self._listener.close()
                    self._listener = None
                    return [(NOT_LISTENING, "")]
                time.sleep(LISTEN_WAIT_S)
                return []

        return await self._on(self._listen_thread, wait)

    async def notify(self, channel: str, payload: str) -> None:
        await self.run(lambda conn: conn.execute("SELECT pg_notify(?, ?)", (channel, payload)))

    def _live(self) -> psycopg.Connection[Any]:
        if self._conn is None or self.lost:
            raise LeasesLost(f"{self.label}: the lease connection is closed")
        return self._conn

    async def _call(self, fn: Callable[[], T]) -> T:
        import psycopg

        try:
            return await self._on(self._thread, fn)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self.lost = True
            raise LeasesLost(f"{self.label}: the lease connection failed: {exc}") from exc

    @staticmethod
    async def _on(thread: ThreadPoolExecutor, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(thread, fn)
