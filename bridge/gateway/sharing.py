"""Workers sharing one PostgreSQL database: claim chats from the intake queue, and take over a dead one's."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Collection, Coroutine, Sequence
from typing import Any

from bridge.errors import StoreError
from bridge.events import Route
from bridge.gateway.delivery import Delivery
from bridge.gateway.dispatcher import Dispatcher
from bridge.gateway.lanes import Job, Lanes
from bridge.store.intake import Claimed, claim_sessions, session_lease, worker_lease
from bridge.store.postgres.leases import (
    LISTENING,
    NOT_LISTENING,
    SESSION_CHANNEL,
    STOP_CHANNEL,
    LeasesLost,
    PgLeases,
)
from bridge.store.tables import DatabaseStore
from bridge.store.workers import WorkerRow, surfaces_text

log = logging.getLogger(__name__)

# A worker with free run slots claims the chats a notification names when told a message came in, and
# looks over the whole queue at least this often regardless (a notification lost to a reconnect, chats
# another worker skipped while it held their rows).
PULL_EVERY_S = 1.0
# Past this many chats named and not yet tried (while every run slot was taken), the next claim looks
# over the whole queue instead, oldest first.
MAX_NAMED = 200
# How often a turn that must wait for a chat's lease tries again.
LEASE_WAIT_S = 0.1
# How long an idle worker tries to open its lease connection again (a database restart) before it stops.
RECONNECT_FOR_S = 10.0
# How often a worker looks for runs and unsent rows of workers that died: they are taken over within it.
SWEEP_EVERY_S = 1.0
# How long a run waits for its chat's messages that another living worker is sending (it took them
# over from a dead one), so the run's answer does not overtake them; past it, the run goes ahead.
LEFT_WAIT_S = 10.0


class WorkShare:
    """This worker's part in sharing the runs of one database with the others.

    - **The intake queue.** Every chat message is stored with a row in `intake` (whichever worker
      received it); a trigger notifies all workers with the chat's session id. A worker with free run
      slots tries the chats named (claim_sessions: one statement, FOR NO KEY UPDATE SKIP LOCKED, then
      the leases), and the whole queue, oldest first, at start, when another worker left chats over,
      and at least every PULL_EVERY_S. After a run it claims nothing unless a notification came that
      it could not act on then (its slots were full, or it held the chat).
    - **One worker tries each notified chat.** Every worker hears every notification; were each to
      try the chat, a message would cost a claim per worker, all but one of them for nothing, and
      the database's work per turn would grow with the workers. So the living workers alike (the
      same surfaces to send on, as the workers table says) split the chats among themselves by
      rendezvous hashing (`preferred`): only the chat's own worker tries it when notified. One that
      cannot take it then (every slot taken) tries it when a slot frees; one that died leaves it to
      the others' look over the whole queue (within PULL_EVERY_S), as does a chat named while the
      workers' views of who lives differ. A stopping worker says at once that it takes no more, and
      the others split its share at their next sweep. Where the workers are not alike, each tries
      every chat.
    - **Leases.** A chat's turns run only in the worker holding its lease, an advisory lock on the
      worker's lease connection, so at most one run per chat runs at a time across all workers, in
      arrival order. The holder answers what comes in meanwhile before it lets go. A dead worker's
      connection ends, and the server frees its leases at once.
    - **Taking over.** Each worker also holds a lock named after itself for as long as it lives. Runs
      left `running` and outbox rows left unsent by a worker whose lock is free are taken over: the
      runs aborted with the usual notice, the rows sent (or marked uncertain) as at a restart. The
      sweep does it every SWEEP_EVERY_S; a run does it for its own chat before it starts, so what a
      dead worker left there goes out before the new answer (see _send_left_first).

    If the lease connection itself fails, this worker can no longer show that the chats it runs are
    its alone: `on_lost` is called (bridge run stops the process at once, as if killed).
    """

    def __init__(
        self,
        store: DatabaseStore,
        leases: PgLeases,
        dispatcher: Dispatcher,
        delivery: Delivery,
        lanes: Lanes,
        *,
        worker_id: str,
        max_runs: int,
        followup: bool,
        on_lost: Callable[[], object],
    ) -> None:
        self.store = store
        self.leases = leases
        self.dispatcher = dispatcher
        self.delivery = delivery
        self.lanes = lanes
        self.worker_id = worker_id
        self.max_runs = max_runs
        self.followup = followup
        self._on_lost = on_lost
        self._serving: set[str] = set()
        # The claims to make: chats named by notifications (session ids), and whether the whole
        # queue is to be looked over (at start, chats left over by another worker's claim).
        self._named: set[str] = set()
        self._whole_queue = True
        self._looked_over = 0.0
        # The session ids of the chats this worker claimed and runs (each with the newest of its
        # messages the claim saw waiting, which the run takes up), and those of them that a
        # notification named meanwhile with a later message: the chat's queue is looked at again
        # before it is let go, or, once let go, it is claimed again, since the message may have come
        # after the run's last look at its queue.
        self._serving_ids: dict[str, int] = {}
        self._named_while_serving: set[str] = set()
        # While a claim is in flight, the chats named meanwhile (and the message, where the notice
        # said): whether it takes them is not known yet, so they are named again once it ends.
        self._named_in_claim: list[tuple[str, int | None]] | None = None
        # The living workers alike among which notified chats are split, this one included (each
        # sweep reads them again); empty: this worker tries every chat named.
        self._peers: tuple[str, ...] = ()
        self._wake = asyncio.Event()
        self._reconnecting = asyncio.Lock()
        # One take-over at a time (the sweep's, a run's): once a run holds it, rows the sweep took
        # over are in the courier already, ahead of anything the run sends.
        self._taking_over = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Begin claiming and taking over; the leases are open already, with this worker's own."""
        for name, loop in (
            ("claim", self._claim_loop),
            ("listen", self._listen_loop),
            ("sweep", self._sweep),
        ):
            self._tasks.append(asyncio.create_task(self._guarded(loop), name=f"sharing-{name}"))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def kick(self, session_id: str, message_id: int) -> None:
        """A message was stored here: claim its chat now rather than once the notification comes."""
        self._name(session_id, message_id)

    def serving(self) -> frozenset[str]:
        return frozenset(self._serving)

    def peers(self) -> tuple[str, ...]:
        """The workers that split notified chats, this one included; empty: it tries every chat."""
        return self._peers

    async def run_leased(self, key: str, job: Job) -> asyncio.Future[None] | None:
        """Run `job` in the chat's lane under its lease (/retry); None if another run holds the chat."""
        if key in self._serving or not await self.leases.lock(session_lease(key)):
            return None
        self._serving.add(key)

        async def leased() -> None:
            try:
                await self._send_left_first(key)
                await job()
            finally:
                # Its session id is not known here, so a message named meanwhile could not be told
                # apart: the whole queue is looked over once it is let go (a rare path: /retry).
                self._whole_queue = True
                await self._release(key)

        return self.lanes.schedule(key, leased, merge=False)

    async def when_leased(self, key: str, job: Job) -> None:
        """Run `job` in the chat's lane under its lease, waiting for the lease while another run holds
        the chat (an agent-to-agent turn into a chat that is busy, here or in another worker)."""
        # Polled: the lease may be another process's, and a lock's release sends no event.
        while (done := await self.run_leased(key, job)) is None:  # noqa: ASYNC110
            await asyncio.sleep(LEASE_WAIT_S)
        await done

    # ---------------------------------------------------------------- the loops

    async def _guarded(self, loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        while True:
            try:
                await loop()
                return
            except LeasesLost as exc:
                # Idle, this worker only needs a new connection. With chats in hand, or messages on
                # their way, it cannot show they are still its alone (another worker may have found
                # its lock free meanwhile and taken them over): it stops, as if killed.
                if self._serving or self.delivery.courier.busy() or not await self._reconnect():
                    log.critical("%s; the chats this worker runs may no longer be its alone", exc)
                    self._on_lost()
                    return

    async def _reconnect(self) -> bool:
        async with self._reconnecting:
            if not self.leases.lost:
                return True  # another loop did it
            deadline = asyncio.get_running_loop().time() + RECONNECT_FOR_S
            while asyncio.get_running_loop().time() < deadline:
                try:
                    await self.leases.reopen()
                    await self.leases.lock(worker_lease(self.worker_id))
                except StoreError:
                    await asyncio.sleep(0.5)
                    continue
                log.warning("the lease connection to the database is back")
                return True
            return False

    async def _claim_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), PULL_EVERY_S)
            self._wake.clear()
            if loop.time() - self._looked_over >= PULL_EVERY_S:
                self._whole_queue = True
            free = self.max_runs - len(self._serving)
            if self.dispatcher.closing or free <= 0 or not (self._whole_queue or self._named):
                # Full: what was named waits in _named, tried once a run lets its chat go.
                continue
            named: set[str] | None = None
            if self._whole_queue or len(self._named) > MAX_NAMED:
                self._whole_queue, self._looked_over = False, loop.time()
                self._named.clear()
            else:
                named, self._named = self._named, set()
            work = functools.partial(
                claim_sessions,
                limit=free,
                skip=set(self._serving),
                surfaces=self.delivery.surfaces(),
                named=named,
                me=self.worker_id,
            )
            self._named_in_claim = []
            try:
                claimed = await self.leases.run(work)
            except LeasesLost:
                raise
            except StoreError as exc:
                log.warning("cannot claim waiting chats: %s", exc)
                self._whole_queue = True
                continue
            finally:
                named_in_claim, self._named_in_claim = self._named_in_claim, None
            if len(claimed) == free:
                # Every slot taken: what was not tried is tried when one frees up.
                if named is None:
                    self._whole_queue = True
                else:
                    self._named |= named - {found.session.id for found in claimed}
            for found in claimed:
                self._serving.add(found.session.key)
                self._serving_ids[found.session.id] = found.newest_id
                self.lanes.schedule(found.session.key, functools.partial(self._serve, found), merge=False)
            for session_id, message_id in named_in_claim:
                # A chat the claim tried by name and did not take is another worker's (this worker's
                # own kick and the database's notice of one message are not tried twice).
                if named is None or session_id not in named or session_id in self._serving_ids:
                    self._name(session_id, message_id)

    def _name(self, session_id: str, message_id: int | None = None) -> None:
        """A message is waiting in the chat (`message_id`: which one, if the notification said)."""
        covered = self._serving_ids.get(session_id)
        if covered is not None:
            # One the claim saw (most often the very message it was claimed for) is the run's.
            if message_id is None or message_id > covered:
                self._named_while_serving.add(session_id)
        elif self._named_in_claim is not None:
            self._named_in_claim.append((session_id, message_id))
        elif self._peers and preferred(self._peers, session_id) != self.worker_id:
            # Another worker's to try: it claims the chat, or every worker's look over the whole
            # queue finds it (see the class's docstring).
            return
        else:
            self._named.add(session_id)
            self._wake.set()

    async def _listen_loop(self) -> None:
        while True:
            for channel, payload in await self.leases.notified():
                if channel == STOP_CHANNEL:
                    if payload in self._serving and await self.lanes.cancel(payload):
                        log.info("stopped the run in %s, as asked in another worker", payload)
                elif channel == SESSION_CHANNEL:
                    # /send, /model or /clear, maybe in another worker: read the chat's row afresh.
                    self.store.forget_session(payload)
                elif channel == LISTENING:
                    # Every change to a chat's row is told here from now on, so the copies are
                    # trusted longer (those read before are dropped); and messages queued while
                    # nothing listened are looked for.
                    self.store.sessions_told(True)
                    self._whole_queue = True
                    self._wake.set()
                elif channel == NOT_LISTENING:
                    self.store.sessions_told(False)
                elif payload:
                    session_id, _, message = payload.partition(" ")
                    self._name(session_id, int(message) if message.isdigit() else None)
                else:
                    # Chats left over by another worker's claim (or a worker of an older version).
                    self._whole_queue = True
                    self._wake.set()

    async def stop_elsewhere(self, key: str) -> bool:
        """/stop or /clear for a chat another worker runs: ask it to stop; True if one was running it."""
        if key in self._serving or await self.leases.is_free(session_lease(key)):
            return False
        await self.leases.notify(STOP_CHANNEL, key)
        return True

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            try:
                await self._take_over()
            except LeasesLost:
                raise
            except StoreError as exc:
                log.warning("cannot look for work left by stopped workers: %s", exc)

    async def _take_over(self) -> None:
        async with self._taking_over:
            await self._take_over_dead()

    async def _take_over_dead(self) -> None:
        others = await self.store.others_with_work(self.worker_id)
        workers = await self.store.workers()
        listed = {row.id for row in workers if row.id != self.worker_id}
        dead = await self._dead(others | listed)
        self._peers = self._alike(workers, dead)
        for gone in listed.intersection(dead):
            # Its row goes at once, not once it has aged out: bridge status lists the living.
            await self.store.leave_worker(gone)
        dead = [w for w in dead if w in others]
        if not dead:
            return
        aborted = await self.store.abort_interrupted_runs(self.dispatcher.interrupted_notices, workers=dead)
        # The notices just written belong to no worker yet, like the dead workers' own rows.
        rows = await self.store.take_over_outbox([*dead, None], self.worker_id, self.delivery.surfaces())
        if aborted or rows:
            log.warning(
                "took over from a stopped worker: %d run(s) aborted and their chats told, %d message(s) "
                "to send",
                len(aborted),
                len(rows),
            )
        if rows:
            await self.delivery.recover(rows)
        self._wake.set()

    async def _dead(self, workers: Collection[str | None]) -> list[str | None]:
        """Those of `workers` whose own lock is free (None: rows no worker holds), in one call."""
        free = await self.leases.free(worker_lease(w) for w in workers if w is not None)
        return [w for w in workers if w is None or worker_lease(w) in free]

    def _alike(self, rows: list[WorkerRow], dead: Collection[str | None]) -> tuple[str, ...]:
        """The living workers that split notified chats, this one included: every active one that
        takes chats, when each says it takes those of the same surfaces as this one (any could
        answer any chat this one could); none otherwise, and each worker then tries every chat.
        A worker that says no surface takes no share: it is starting (and tries every chat itself),
        stopping (and takes none), or of a version that does not split."""
        now = time.time()
        mine = surfaces_text(self.delivery.surfaces())
        living = [
            row
            for row in rows
            if row.id not in dead and row.role == "active" and row.alive(now) and row.surfaces
        ]
        if not mine or all(row.id != self.worker_id for row in living):
            return ()
        if any(row.surfaces != mine for row in living):
            return ()
        return tuple(sorted(row.id for row in living))

    # ---------------------------------------------------------------- one chat

    async def _send_left_first(self, key: str, left: Collection[str | None] | None = None) -> None:
        """Before a run in `key`: what a dead worker left in that chat (a reply it had written, the
        notice of a run it cut short) is taken over now and queued in this worker's courier, ahead of
        the run's answer, rather than at the next sweep, which could come after the answer. Messages
        another living worker took over are waited for, up to LEFT_WAIT_S. `left`: the workers that
        left something there, as the claim found once it held the chat (None: looked for here)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEFT_WAIT_S
        try:
            while True:
                # Held even when the claim found nothing: a sweep taking rows over (no longer
                # another worker's, not yet in the courier) finishes first.
                async with self._taking_over:
                    if left is None:
                        left = await self.store.left_in(key, self.worker_id, self.delivery.surfaces())
                    if not left:
                        return
                    dead = await self._dead(left)
                    if dead:
                        await self._take_over_dead()
                if loop.time() >= deadline:
                    log.warning(
                        "%s: this chat's earlier messages are still on their way in another worker after "
                        "%g s; answering anyway, so the answer may arrive before them (check that "
                        "worker's connection to the platform)",
                        key,
                        LEFT_WAIT_S,
                    )
                    return
                if not dead:
                    # Polled: another worker's sending has no event here.
                    await asyncio.sleep(LEASE_WAIT_S)
                left = None
        except StoreError as exc:
            log.warning("%s: cannot look for messages a stopped worker left there: %s", key, exc)

    async def _serve(self, claimed: Claimed) -> None:
        """Answer the chat's waiting messages, oldest first, then let its lease go."""
        key, session = claimed.session.key, claimed.session
        waiting: tuple[int, str | None] | None = (claimed.message_id, claimed.platform_msg_id)
        # The newest message known to wait, while no look at the queue has found more (None after).
        newest: int | None = claimed.newest_id
        try:
            await self._send_left_first(key, claimed.left)
            while waiting is not None and not self.dispatcher.closing:
                route = Route.from_json(session.last_route)
                if route is None:
                    await self.store.drop_waiting(session.id, waiting[0])
                    return
                reply_to = waiting[1].rsplit(":", 1)[-1] if waiting[1] else None
                route = dataclasses.replace(route, reply_to=reply_to)
                upto = waiting[0] if self.followup else None
                took_up = await self.dispatcher.run_turn(key, route, route.surface, upto=upto)
                if (
                    took_up
                    and session.id not in self._named_while_serving
                    and (upto is None or upto == newest)
                ):
                    # The run took up every message that had come by its start (in followup mode:
                    # the claim saw no other), and each one stored since is named by its notice,
                    # before the chat is let go (then looked for here) or after (then claimed
                    # again): no look at the queue is needed.
                    return
                newest = None
                after = await self._next_waiting(session.id)
                if after is not None and after[0] <= waiting[0]:
                    # The run ended before it took the message up (it failed, and said so): not
                    # again and again; /retry answers it.
                    await self.store.drop_waiting(session.id, after[0])
                    after = await self._next_waiting(session.id)
                waiting = after
        finally:
            await self._release(key, session.id)

    async def _next_waiting(self, session_id: str) -> tuple[int, str | None] | None:
        # This look sees every message whose notification has come by now: only those named later
        # call for a claim once the chat is let go (see _release).
        self._named_while_serving.discard(session_id)
        return await self.store.next_waiting(session_id)

    async def _release(self, key: str, session_id: str | None = None) -> None:
        """Let the chat go; `session_id`: the chat was claimed (not run through run_leased)."""
        try:
            await self.leases.unlock(session_lease(key))
        except LeasesLost as exc:
            log.critical("%s", exc)
            self._on_lost()
        finally:
            # After the unlock: a claim meanwhile must not take the chat again while it is held.
            self._serving.discard(key)
        if session_id is not None:
            self._serving_ids.pop(session_id, None)
            if session_id in self._named_while_serving:
                # A message that came in after the run's last look at its queue, before the lease was
                # let go: left to this worker, which claims the chat again.
                self._named_while_serving.discard(session_id)
                self._named.add(session_id)
        if self._named or self._whole_queue:
            # A slot is free, and there is work this worker knows of.
            self._wake.set()


def preferred(workers: Sequence[str], session_id: str) -> str:
    """The worker of `workers` that tries the chat when notified (rendezvous hashing): each worker's
    score depends only on itself and the chat, so a worker that joins or leaves moves only the chats
    it gains or had, and workers that agree on who lives agree on every chat's worker."""
    return max(
        workers, key=lambda worker: hashlib.blake2b(f"{worker} {session_id}".encode(), digest_size=8).digest()
    )
