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
# CLAIM_LOST_AFTER_S; a process that takes the claim waits TAKEOVER_GRACE_S (longer) before it
# starts, so the two never run at once.
CLAIM_CHECK_S = 0.5
CLAIM_LOST_AFTER_S = 1.5
TAKEOVER_GRACE_S = 5.0
# Why two processes never poll (or answer) at once, with these numbers:
# - The lock is held by the claim connection, so it is free only once that connection has ended
#   (a kill, a server restart, a cut network, a terminated backend): at t_free. The holder's last
#   confirmation (a round trip on that connection, in watch_claim) came before: t_c <= t_free.
# - The holder checks again at most CLAIM_CHECK_S after each check ends, and a check lasts at most
#   max(what is left of CLAIM_LOST_AFTER_S, CLAIM_CHECK_S): a dead connection fails at once, a hung
#   one (a silent network) is given up. The first check that ends CLAIM_LOST_AFTER_S or more after
#   t_c calls `lost`, which in `bridge run` ends the process at once (os._exit: its long poll's
#   connection is closed by the kernel). So it has stopped polling by
#   t_c + CLAIM_LOST_AFTER_S + 2 * CLAIM_CHECK_S = t_c + 2.5 s (1.5 + 0.5 of sleep + 0.5 of check).
# - Any other process takes the lock at t >= t_free >= t_c, and whether it stood by or has just
#   started, waits TAKEOVER_GRACE_S before it listens (a fresh start skips the wait only where no
#   other worker is registered on the database, so nothing can be listening: platforms.py), then
#   confirms it still holds the lock: it starts at t_c + 5 s or later. 2.5 s to spare, for a slow
#   event loop in the process that stops.
# - A process that does not run at all (frozen: SIGSTOP, a paused VM) checks nothing, and the others
#   end its connections once it has been silent long enough (gateway/presence.py). Woken, the first
#   thing its watch does, where TAKEOVER_GRACE_S or more passed since t_c, is look at the socket of
#   the connection holding the lock, without a round trip: one the server ended has its goodbye
#   waiting, and the process stops at once, before any other task runs on (a round trip would let
#   the poller ask once more beside the one that took over). One the server did not end still holds
#   the lock, and nobody else could have taken it.


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
        fresh_grace: bool = False,
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
        which would abort their runs as its own at start, holds it alone. `fresh_grace` (with
        `standby`): a claim granted at once is waited on too, as a standby's is, since the one that
        held it until just now may be cut off from the database and not yet stopped.
        """
        what = what or self.engine.label
        if await self.engine.claim(name, shared=shared):
            if not fresh_grace or standby is None:
                return True
            log.info(
                "waiting %g s before taking %s: a worker that held it until just now may still be stopping",
                TAKEOVER_GRACE_S,
                what,
            )
            granted = await self._grace(name, standby, what)
            if granted is not None:
                return granted
        elif standby is None:
            raise StoreError(
                f"another Bridge process is already running on {self.engine.label}",
                remedy="stop it first: one `bridge chat` per database, or run `bridge run` to stand by",
            )
        else:
            log.warning(
                "standing by: another Bridge process is running on %s; this one takes over when it ends",
                what,
            )
        while not standby.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(standby.wait(), STANDBY_POLL_S)
            if not standby.is_set() and await self._try_claim(name, shared=shared):
                granted = await self._grace(name, standby, what)
                if granted is not None:
                    return granted
        return False

    async def _grace(self, name: str, standby: asyncio.Event, what: str) -> bool | None:
        """Just after taking `name`: wait TAKEOVER_GRACE_S, then True if this process still holds it
        (it takes over), False if `standby` was set meanwhile, None if it was lost meanwhile (stand by
        again)."""
        # The other process may be alive and merely cut off from the database (a server restart, a
        # cut network): it stops within CLAIM_LOST_AFTER_S and a check or two (see the constants).
        # Wait for that first, so two processes never poll or answer at once.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(standby.wait(), TAKEOVER_GRACE_S)
        if standby.is_set():
            return False
        try:
            held = await self.engine.holds(name)
        except StoreError:
            held = False
        if not held:
            # Its connection dropped while it waited: the other process may have taken it back.
            log.warning("lost %s while waiting to take it over; standing by again", what)
            return None
        log.warning("taking over: the other process on %s has ended", what)
        return True

    async def watch_claim(
        self, lost: Callable[[], object], name: str = WORKER_CLAIM, *, shared: bool = False
    ) -> None:
        """While this process answers: check every CLAIM_CHECK_S that it still holds the database,
        take it again if its connection died, and call `lost` once it could not show that for
        CLAIM_LOST_AFTER_S (a standby may be taking over then)."""
        confirmed = time.monotonic()
        while True:
            await asyncio.sleep(CLAIM_CHECK_S)
            stalled = time.monotonic() - confirmed
            if stalled >= TAKEOVER_GRACE_S and self.engine.dropped(name):
                # This process did not run for that long (frozen: SIGSTOP, a paused VM), and the
                # server ended its connection meanwhile (the others end a silent worker's: presence.py),
                # so another may be listening already. Not even a round trip more (other tasks would
                # run while it is on its way): stop now. Not ended, nobody could have taken `name`,
                # and the check below confirms it as usual.
                log.error(
                    "did not run for %.0f s, and the server ended its connection meanwhile; stopping at once",
                    stalled,
                )
                lost()
                return
            left = confirmed + CLAIM_LOST_AFTER_S - time.monotonic()
            try:
                # Bounded: a check hung on a silent network must not keep this process going past
                # the time a taker waits (see TAKEOVER_GRACE_S).
                async with asyncio.timeout(max(left, CLAIM_CHECK_S)):
                    held = await self._confirm(name, shared=shared)
            except TimeoutError:
                held = False
            if held:
                confirmed = time.monotonic()
            elif time.monotonic() - confirmed >= CLAIM_LOST_AFTER_S:
                log.error("lost the claim on %s; stopping at once", self.engine.label)
                lost()
                return

    async def _confirm(self, name: str, *, shared: bool) -> bool:
        """Whether this process holds `name`: still, or again (its connection died, nobody took it)."""
        if await self.engine.holds(name):
            return True
        if await self._try_claim(name, shared=shared):
            log.warning("took the claim on %s back after its connection dropped", self.engine.label)
            return True
        return False

    async def _try_claim(self, name: str, *, shared: bool = False) -> bool:
        try:
            return await self.engine.claim(name, shared=shared)
        except StoreError as exc:
            log.warning("cannot reach %s to take its claim: %s", self.engine.label, exc)
            return False
