"""SQLite's group commit and its threads: jobs on one connection, writes waiting together committed in
one transaction, each in a savepoint of its own, and the results handed back to their event loops."""

from __future__ import annotations

import contextlib
import queue
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from bridge.errors import StoreError
from bridge.store.batch import Job, JobThread, Outcome, settle

# How many queued writes one transaction may carry. Each is a savepoint; the commit is shared.
BATCH_LIMIT = 256
CHECK_PATH = "check the permissions of the folder and the free disk space"


@dataclass(slots=True)
class Trips:
    """The engine's work, counted for the benchmarks: writes asked, the transactions that carried
    them, reads, and how many of them crossed to a thread."""

    writes: int = 0
    commits: int = 0
    reads: int = 0
    # Jobs handed to a thread (reads, and writes that could not run on the loop): the trips that
    # cost a wake-up of another thread and a wait for it.
    thread_jobs: int = 0


class DatabaseThread(JobThread):
    """A thread that owns one connection and runs queued jobs on it; writes waiting together share
    one transaction."""

    def __init__(
        self, name: str, label: str, connect: Callable[[], sqlite3.Connection], trips: Trips
    ) -> None:
        # A daemon (JobThread): SQLite survives the cut of a process nobody closed.
        super().__init__(name)
        self._connect = connect
        self._label = label
        self._trips = trips
        self.start()

    def run(self) -> None:
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            self._refuse_rest(StoreError(f"cannot open {self._label}: {exc}", remedy=CHECK_PATH), wait=True)
            return
        try:
            self._serve(conn)
        finally:
            conn.close()
            # A job queued while the store was closing would otherwise wait for ever.
            self._refuse_rest(StoreError("store is closed"), wait=False)

    def _serve(self, conn: sqlite3.Connection) -> None:
        waiting: Job | None = None
        while True:
            job = waiting if waiting is not None else self._jobs.get()
            waiting = None
            if job is None:
                return
            if job.mode != "write":
                settle([run_one(conn, job)])
                continue
            batch, waiting, stopping = self._batch(job, BATCH_LIMIT, lambda queued: queued.mode == "write")
            self._trips.commits += 1
            settle(commit(conn, batch))
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
            settle([Outcome(job, error=error)])


def run_one(conn: sqlite3.Connection, job: Job) -> Outcome:
    try:
        if job.mode == "snapshot":
            # One deferred transaction, so the reads agree with each other.
            conn.execute("BEGIN")
            try:
                return Outcome(job, job.fn(conn))
            finally:
                conn.execute("COMMIT")
        return Outcome(job, job.fn(conn))
    except BaseException as exc:
        return Outcome(job, error=exc)


def commit(conn: sqlite3.Connection, batch: list[Job], *, begun: bool = False) -> list[Outcome]:
    """Run `batch` as one transaction (`begun`: already begun), each job in its own savepoint, with
    one commit. When the database itself fails (locked, full), each job is run again alone, so one
    job's trouble (a write too big for the disk) does not fail the others."""
    try:
        if not begun:
            conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        return [Outcome(job, error=exc) for job in batch]
    if len(batch) == 1:
        job = batch[0]
        try:
            value = job.fn(conn)
            conn.execute("COMMIT")
        except BaseException as exc:
            rollback(conn)
            return [Outcome(job, error=exc)]
        return [Outcome(job, value)]
    outcomes: list[Outcome] = []
    try:
        for job in batch:
            outcomes.append(in_savepoint(conn, job))
        conn.execute("COMMIT")
    except sqlite3.OperationalError:
        rollback(conn)
        return [outcome for job in batch for outcome in commit(conn, [job])]
    return outcomes


def in_savepoint(conn: sqlite3.Connection, job: Job) -> Outcome:
    conn.execute("SAVEPOINT job")
    try:
        value = job.fn(conn)
    except sqlite3.OperationalError:
        raise
    except BaseException as exc:
        conn.execute("ROLLBACK TO job")
        conn.execute("RELEASE job")
        return Outcome(job, error=exc)
    conn.execute("RELEASE job")
    return Outcome(job, value)


def rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
