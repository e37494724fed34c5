"""This process's row in the workers table, kept fresh while it runs: what `bridge status` lists, and
which chats it takes, by which the workers sharing the runs split them (sharing.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from bridge.errors import StoreError
from bridge.store.sessions import new_id
from bridge.store.tables import DatabaseStore

log = logging.getLogger(__name__)

# How often a worker says it is alive; bridge.store.workers.ALIVE_WITHIN_S allows three misses.
BEAT_S = 5.0
# How long a stopping worker waits to say it takes no new chats.
TAKING_NOTHING_WAIT_S = 1.0


class Presence:
    """Registered at start as a standby, made active once it holds the database, removed at a clean
    stop; a killed process's row stops being refreshed, and `bridge status` shows it as gone."""

    def __init__(self, store: DatabaseStore) -> None:
        self.store = store
        self.id = new_id()
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
        failing = False
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
            else:
                failing = False
