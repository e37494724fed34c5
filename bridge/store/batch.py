"""Jobs run on a database thread and their results handed back to the event loops that asked: what
SQLite's thread (sqlite/batch.py) and PostgreSQL's writer (postgres/engine.py) share."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["raw", "write", "read", "snapshot"]


@dataclass(slots=True)
class Job:
    # A function of the thread's connection (sqlite3's, or the tables' Conn on PostgreSQL).
    fn: Callable[[Any], Any]
    mode: Mode
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop = field(repr=False)
    # Called on the loop once the job has run, whether or not anyone still waits for its future.
    done: Callable[[], None] | None = None


@dataclass(slots=True)
class Outcome:
    job: Job
    value: Any = None
    error: BaseException | None = None


def settle(outcomes: list[Outcome]) -> None:
    """Hand results back to their loops: one wake-up per loop for the whole batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome.job.loop, []).append(outcome)
    for loop, done in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop closed while the job ran
            loop.call_soon_threadsafe(resolve, done)


def resolve(outcomes: list[Outcome]) -> None:
    for outcome in outcomes:
        if outcome.job.done is not None:
            outcome.job.done()
        future = outcome.job.future
        if future.done():  # the caller was cancelled; the work itself still ran to its end
            continue
        if outcome.error is not None:
            future.set_exception(outcome.error)
        else:
            future.set_result(outcome.value)


class JobThread(threading.Thread):
    """A thread serving a queue of jobs, in order; None in the queue stops it. A daemon, so a store
    nobody closed cannot hold the process open. Subclasses set themselves up, then call start()."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()

    def submit(self, job: Job) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        self._jobs.put(None)

    def _batch(
        self, first: Job, limit: int, fits: Callable[[Job], bool] = lambda job: True
    ) -> tuple[list[Job], Job | None, bool]:
        """`first` and the jobs queued behind it that `fits`, up to `limit`: the batch, the first job
        queued that did not fit (to run next), and whether the stop sentinel came."""
        batch = [first]
        while len(batch) < limit:
            try:
                queued = self._jobs.get_nowait()
            except queue.Empty:
                break
            if queued is None:
                return batch, None, True
            if not fits(queued):
                return batch, queued, False
            batch.append(queued)
        return batch, None, False
