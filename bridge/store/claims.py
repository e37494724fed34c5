"""The worker claim: the one process that answers on a database, the standbys, and keeping it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from bridge.errors import StoreError
from bridge.store.engine import Database

log = logging.getLogger(__name__)

# The claim of the process that answers on a database (see WorkerClaim.claim_worker).
WORKER_CLAIM = "bridge.worker"
# How often a standing-by process tries to take over: a killed worker is replaced within this
# (plus TAKEOVER_GRACE_S and its start-up), inside the 15 s that platforms may go unpolled.
STANDBY_POLL_S = 2.0
# The active process checks its claim this often, and stops once it could not confirm it for
# CLAIM_LOST_AFTER_S; a standby that takes the claim waits TAKEOVER_GRACE_S (longer) before it
# starts, so the two never run at once.
CLAIM_CHECK_S = 0.5
CLAIM_LOST_AFTER_S = 1.5
TAKEOVER_GRACE_S = 5.0


class WorkerClaim(Database):
    """The claim is the engine's lock WORKER_CLAIM: on PostgreSQL an advisory lock held by a
    connection of its own, which the server drops the moment that connection ends; on SQLite
    always granted (one process per file is the operator's to keep)."""

    async def claim_worker(
        self,
        *,
        standby: asyncio.Event | None = None,
        name: str = WORKER_CLAIM,
        what: str = "",
        shared: bool = False,
    ) -> bool:
        """Make this process the one that answers on the database: True once it is.

        One process at a time runs the platforms and the runs; a second one on the same database
        would answer messages twice. Without `standby`, a database another process holds is a
        StoreError saying so (`bridge chat`). With it (`bridge run`), this process stands by and
        takes over when the other one ends, however it ends (a killed process frees its claim at
        once); False if `standby` is set first (a SIGTERM while standing by).

        `name` claims something narrower than the whole database, `what` (a platform's connection,
        where workers share the runs): the same standing by and taking over, for that one thing.
        `shared`: workers that share the runs hold the database together, while a `bridge chat`,
        which would abort their runs as its own at start, holds it alone.
        """
        what = what or self.engine.label
        if await self.engine.claim(name, shared=shared):
            return True
        if standby is None:
            raise StoreError(
                f"another Bridge process is already running on {self.engine.label}",
                remedy="stop it first: one `bridge chat` per database, or run `bridge run` to stand by",
            )
        log.warning(
            "standing by: another Bridge process is running on %s; this one takes over when it ends",
            what,
        )
        while not standby.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(standby.wait(), STANDBY_POLL_S)
            if not standby.is_set() and await self._try_claim(name, shared=shared):
                # The other process may be alive and merely cut off from the database (a server
                # restart): it sees that within CLAIM_LOST_AFTER_S and stops. Wait for that first,
                # so two processes never poll or answer at once.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(standby.wait(), TAKEOVER_GRACE_S)
                if standby.is_set():
                    return False
                log.warning("taking over: the other process on %s has ended", what)
                return True
        return False

    async def watch_claim(
        self, lost: Callable[[], object], name: str = WORKER_CLAIM, *, shared: bool = False
    ) -> None:
        """While this process answers: check every CLAIM_CHECK_S that it still holds the database,
        take it again if its connection died, and call `lost` once it could not show that for
        CLAIM_LOST_AFTER_S (a standby may be taking over then)."""
        confirmed = time.monotonic()
        while True:
            await asyncio.sleep(CLAIM_CHECK_S)
            if await self.engine.holds(name):
                confirmed = time.monotonic()
            elif await self._try_claim(name, shared=shared):
                log.warning("took the claim on %s back after its connection dropped", self.engine.label)
                confirmed = time.monotonic()
            elif time.monotonic() - confirmed > CLAIM_LOST_AFTER_S:
                log.error("lost the claim on %s; stopping at once", self.engine.label)
                lost()
                return

    async def _try_claim(self, name: str, *, shared: bool = False) -> bool:
        try:
            return await self.engine.claim(name, shared=shared)
        except StoreError as exc:
            log.warning("cannot reach %s to take its claim: %s", self.engine.label, exc)
            return False
