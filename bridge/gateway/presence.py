"""This process's row in the workers table, kept fresh while it runs: what `bridge status` lists, and
which chats it takes, by which the workers sharing the runs split them (sharing.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from bridge.errors import StoreError
from bridge.store.sessions import new_id
from bridge.store.tables import DatabaseStore

log = logging.getLogger(__name__)

# How often a worker says it is alive; bridge.store.workers.ALIVE_WITHIN_S allows three misses.
BEAT_S = 5.0
# How long a stopping worker waits to say it takes no new chats.
TAKING_NOTHING_WAIT_S = 1.0
# How long another worker may go without saying it is alive before its connections are ended
# ([storage] silent_worker_timeout_s sets it).
SILENT_AFTER_S = 30.0
# Looks at the others further apart than this (this worker's own beat was held up, or it did not run)
# judge nothing: what held this one up may have held up all (a lock, a stalled server), and the
# others' rows are read as if for the first time.
LOOK_GAP_S = 2 * BEAT_S


class Presence:
    """Registered at start as a standby, made active once it holds the database, removed at a clean
    stop; a killed process's row stops being refreshed, and `bridge status` shows it as gone.

    It also watches the others. A killed worker's connections close, and the server frees its locks
    (its chats' leases, a platform's connection, the database's claim) at once. A worker that stops
    without its connections closing keeps them: a frozen process (SIGSTOP, a paused VM), or a
    machine that lost its power or its network, whose connections the server would hold for hours
    (TCP's keepalive). So a worker whose row has not changed for `silent_after_s`, by this process's
    own clock (the machines' clocks may differ), has its connections ended here. Should it be alive
    after all, it finds its claims gone and stops, as when the database restarts (claims.py).
    """

    def __init__(
        self, store: DatabaseStore, worker_id: str | None = None, *, silent_after_s: float = SILENT_AFTER_S
    ) -> None:
        self.store = store
        self.id = worker_id or new_id()
        self.silent_after_s = silent_after_s
        # Each other worker's `seen_at` as last read, and since when (time.monotonic()) it has read so;
        # and those whose connections were ended since it last changed.
        self._heard: dict[str, tuple[float, float]] = {}
        self._ended: set[str] = set()
        self._looked: float | None = None
        self.role = "standby"
        self.holds = ""
        # False where workers share the runs: several are active at once.
        self.sole = True
        # The surfaces of the chats this process takes, which grow as its platforms start (each beat
        # says them again), and none once it stops taking work: workers sharing the runs split the
        # chats a notification names among those that take the same (sharing.py).
        self.surfaces: Callable[[], Iterable[str]] = tuple
        self._beating: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.store.register_worker(self.id, role=self.role, holds=self.holds, surfaces=self.surfaces())
        self._beating = asyncio.create_task(self._beat(), name="worker-presence")

    async def update(self, role: str, holds: str) -> None:
        self.role, self.holds = role, holds
        await self.store.beat_worker(
            self.id, role=role, holds=holds, sole=self.sole, surfaces=self.surfaces()
        )

    async def taking_nothing(self) -> None:
        """Say at once that this process takes no new chats (it is stopping), so that the others stop
        leaving it its share of them. Best effort, and bounded: a database out of reach must not hold
        up the stop, and the others' looks over the whole queue find its share within a second."""
        self.surfaces = tuple
        with contextlib.suppress(StoreError, TimeoutError):
            await asyncio.wait_for(self.update(self.role, self.holds), TAKING_NOTHING_WAIT_S)

    async def stop(self) -> None:
        if self._beating is None:
            return
        self._beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._beating
        self._beating = None
        # Best effort: a database that is gone cannot be told, and the row then ages out.
        with contextlib.suppress(StoreError):
            await self.store.leave_worker(self.id)

    async def _beat(self) -> None:
        failing = refused = False
        while True:
            await asyncio.sleep(BEAT_S)
            try:
                await self.store.beat_worker(
                    self.id, role=self.role, holds=self.holds, sole=self.sole, surfaces=self.surfaces()
                )
            except StoreError as exc:
                if not failing:
                    log.warning("cannot record that this worker is alive: %s", exc)
                failing = True
                continue
            failing = False
            try:
                await self.end_silent()
            except StoreError as exc:
                # Tried again at the next beat; said once, not every 5 s.
                if not refused:
                    log.warning("cannot end the connections of a worker gone silent: %s", exc)
                refused = True
            except Exception:
                # A bug here must not stop the beats: the others would take this worker for silent.
                log.exception("watching the other workers failed")
            else:
                refused = False

    async def end_silent(self) -> list[str]:
        """End the connections of the workers silent for `silent_after_s` (see the class): the ids
        of those that had some."""
        rows = await self.store.workers()
        now = time.monotonic()
        if self._looked is None or now - self._looked > LOOK_GAP_S:
            self._heard = {}
        self._looked = now
        heard: dict[str, tuple[float, float]] = {}
        ended: list[str] = []
        for row in rows:
            if row.id == self.id:
                continue
            last = self._heard.get(row.id)
            if last is None or last[0] != row.seen_at:
                heard[row.id] = (row.seen_at, now)
                self._ended.discard(row.id)
                continue
            heard[row.id] = last
            if now - last[1] < self.silent_after_s or row.id in self._ended:
                continue
            count = await self.store.end_worker_connections(row.id)
            self._ended.add(row.id)
            if count:
                ended.append(row.id)
                log.warning(
                    "worker %s (%s, pid %d) has not said it is alive for %.0f s: frozen, or its machine "
                    "is gone or cut off; ended its %d database connection(s), so that what it held "
                    "passes to the living",
                    row.id,
                    row.host,
                    row.pid,
                    now - last[1],
                    count,
                )
        self._heard = heard
        self._ended &= heard.keys()
        return ended
