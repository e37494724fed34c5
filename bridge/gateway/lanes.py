"""Session lanes: runs of one key never overlap, and one slow key never blocks another."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

# A coroutine, not any awaitable: the lane runs it as a task so that /stop can cancel it.
Job = Callable[[], Coroutine[Any, Any, object]]


class SharedLanes(Protocol):
    """The lanes of chats that several workers share (bridge.gateway.sharing.WorkShare): a chat's runs
    go where its lease is held. What the dispatcher and agent-to-agent turns ask of them."""

    def kick(self, session_id: str, message_id: int) -> None:
        """A message was stored in the shared intake for the session: claim it now rather than once
        the database's notification comes."""

    async def run_leased(self, key: str, job: Job) -> asyncio.Future[None] | None:
        """Run `job` in the chat's lane under its lease (/retry); None if another run holds the chat."""

    async def when_leased(self, key: str, job: Job) -> None:
        """Run `job` in the chat's lane under its lease, waiting for the lease while another run holds
        the chat."""


@dataclass(slots=True)
class _Entry:
    job: Job
    waiters: list[asyncio.Future[None]]
    # A chat message's job may absorb the next one (both read the same history); an agent-to-agent
    # turn never does: its reply goes to another session, not to this chat.
    merge: bool
    # When its first message came: how long the chat has waited, for the dashboard.
    queued_at: float = field(default_factory=time.time)


@dataclass(slots=True)
class _Lane:
    queue: deque[_Entry] = field(default_factory=deque)
    worker: asyncio.Task[None] | None = None
    current: asyncio.Task[object] | None = None
    # Taken from the queue, waiting for a free run slot (max_concurrent_runs): still waiting.
    next: _Entry | None = None
    # When the run in progress began.
    started_at: float | None = None

    def waiting(self) -> list[_Entry]:
        return ([self.next] if self.next is not None else []) + list(self.queue)


@dataclass(frozen=True, slots=True)
class LaneState:
    """A chat with a run in progress or messages waiting, as the dashboard shows it: since when."""

    key: str
    # When its run began; None while nothing runs (all run slots are taken).
    running_since: float | None
    waiting: int
    # When the oldest message still waiting came; None when none waits.
    waiting_since: float | None


class Lanes:
    """One worker per busy key.

    Messages that arrive while a run is busy are already stored; the next run reads them all from
    history, so they are answered together in one follow-up run instead of each re-answering the
    others.
    """

    def __init__(self, max_concurrent_runs: int) -> None:
        self._lanes: dict[str, _Lane] = {}
        self._slots = asyncio.Semaphore(max_concurrent_runs)

    def busy(self, key: str) -> bool:
        lane = self._lanes.get(key)
        return lane is not None and lane.current is not None and not lane.current.done()

    def queued(self, key: str) -> int:
        """Messages of the key waiting for a run (the running one not counted)."""
        lane = self._lanes.get(key)
        return sum(len(entry.waiters) for entry in lane.waiting()) if lane else 0

    def running(self) -> int:
        """Runs in progress, all keys together."""
        return sum(1 for key in self._lanes if self.busy(key))

    def depth(self) -> int:
        """Messages waiting for a run, all keys together."""
        return sum(self.queued(key) for key in self._lanes)

    def active(self) -> list[LaneState]:
        """Each key with a run in progress or messages waiting, the longest-running first."""
        states = []
        for key, lane in list(self._lanes.items()):
            waiting = lane.waiting()
            running = lane.started_at if self.busy(key) else None
            if running is None and not waiting:
                continue
            since = min((entry.queued_at for entry in waiting), default=None)
            states.append(LaneState(key, running, self.queued(key), since))
        return sorted(states, key=lambda state: min(state.running_since or 1e18, state.waiting_since or 1e18))

    def schedule(self, key: str, job: Job, *, merge: bool = True) -> asyncio.Future[None]:
        """Run `job` in the key's lane (after the work queued before it); the future resolves when
        it is done, or when /clear or /stop drops it."""
        lane = self._lanes.setdefault(key, _Lane())
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        last = lane.queue[-1] if lane.queue else None
        if merge and last is not None and last.merge:
            last.job = job  # the latest message decides where the follow-up run answers
            last.waiters.append(waiter)
        else:
            lane.queue.append(_Entry(job, [waiter], merge))
        if lane.worker is None or lane.worker.done():
            lane.worker = asyncio.create_task(self._drain(key, lane), name=f"lane:{key}")
        return waiter

    async def _drain(self, key: str, lane: _Lane) -> None:
        try:
            while lane.queue:
                entry = lane.next = lane.queue.popleft()
                async with self._slots:
                    lane.next = None
                    lane.started_at = time.time()
                    lane.current = asyncio.create_task(entry.job(), name=f"run:{key}")
                    try:
                        await lane.current
                    except asyncio.CancelledError:
                        # The run was cancelled by /clear or /stop; the lane itself lives on unless
                        # the worker was cancelled too.
                        current_task = asyncio.current_task()
                        if current_task is not None and current_task.cancelling():
                            raise
                    except Exception:
                        log.exception("run in lane %s failed", key)
                    finally:
                        lane.current = lane.started_at = None
                        _resolve(entry.waiters)
        finally:
            # Whatever ended the worker, its lane goes with it: a lane left behind with a finished
            # worker would make idle() wait on it forever.
            for entry in lane.waiting():
                _resolve(entry.waiters)
            lane.queue.clear()
            lane.next = None
            if self._lanes.get(key) is lane:
                del self._lanes[key]

    async def cancel(self, key: str) -> bool:
        """Cancel the key's running run and drop queued work; True if a run was cancelled."""
        lane = self._lanes.get(key)
        if lane is None:
            return False
        for entry in lane.queue:
            _resolve(entry.waiters)
        lane.queue.clear()
        current = lane.current
        if current is None or current.done():
            return False
        current.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await current
        return True

    async def idle(self) -> None:
        """Wait until every lane has finished its work."""
        while workers := [
            lane.worker for lane in self._lanes.values() if lane.worker and not lane.worker.done()
        ]:
            await asyncio.gather(*workers, return_exceptions=True)

    def drop_queued(self) -> int:
        """Forget the work waiting behind the runs in progress (at shutdown: the messages stay stored,
        and the next start answers them). Returns how many messages were waiting."""
        dropped = 0
        for lane in self._lanes.values():
            for entry in lane.queue:
                dropped += len(entry.waiters)
                _resolve(entry.waiters)
            lane.queue.clear()
        return dropped

    async def close(self) -> None:
        for key in list(self._lanes):
            await self.cancel(key)
        await self.idle()


def _resolve(waiters: list[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)
