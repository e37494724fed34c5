"""SQLite's writes: committed together on the event loop, one write's failure its own, and never a wait
on the loop for a lock or a disk sync."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.errors import StoreError
from bridge.store.engine import Conn
from bridge.store.sqlite import SQLiteStore
from bridge.store.sqlite.engine import SQLiteEngine

# `store` is the SQLite one here: these are about SQLite's writes.
pytestmark = pytest.mark.sqlite_only


def engine_of(store: SQLiteStore) -> SQLiteEngine:
    engine = store.engine
    assert isinstance(engine, SQLiteEngine)
    return engine


async def commits_during(store: SQLiteStore, work: Any) -> int:
    """How many COMMITs the writes' connection ran while `work` was awaited."""
    engine = engine_of(store)
    statements: list[str] = []
    await engine.on_writer(lambda conn: conn.set_trace_callback(statements.append))
    try:
        await work
    finally:
        await engine.on_writer(lambda conn: conn.set_trace_callback(None))
    return sum(1 for s in statements if s == "COMMIT")


async def test_writes_queued_together_share_one_commit(store: SQLiteStore) -> None:
    session = await store.ensure_active_session("main")
    writes = asyncio.gather(*(store.add_user_message(session.id, f"m{n}") for n in range(200)))
    commits = await commits_during(store, writes)
    assert await store.count_messages(session.id) == 200
    # All 200 were queued in one pass of the event loop: one commit carries them.
    assert commits == 1, commits
    # Order of arrival is the order written.
    assert [m.content for m in await store.history(session.id, 200)] == [f"m{n}" for n in range(200)]


async def test_a_write_that_raises_is_undone_alone_and_the_others_in_its_batch_are_kept(
    store: SQLiteStore,
) -> None:
    session = await store.ensure_active_session("main")

    def half_then_fail(conn: Conn) -> None:
        conn.execute(
            "INSERT INTO messages (session_id, kind, content, created_at) VALUES (?, 'user', 'half', 0)",
            (session.id,),
        )
        raise ValueError("the tool exchange could not be encoded")

    writes = [store.add_user_message(session.id, f"m{n}") for n in range(50)]
    writes.insert(25, store._write(half_then_fail))
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert isinstance(results[25], ValueError)
    assert all(isinstance(r, int) for i, r in enumerate(results) if i != 25)
    contents = [m.content for m in await store.history(session.id, 100)]
    assert "half" not in contents
    assert len(contents) == 50


async def test_a_database_error_in_one_write_does_not_fail_the_rest_of_its_batch(store: SQLiteStore) -> None:
    session = await store.ensure_active_session("main")

    def broken(conn: Conn) -> None:
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    writes = [store.add_user_message(session.id, f"m{n}") for n in range(30)]
    writes.insert(10, store._write(broken))
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert isinstance(results[10], StoreError)
    assert "no_such_table" in str(results[10])
    assert isinstance(results[10].__cause__, sqlite3.OperationalError)
    assert all(isinstance(r, int) for i, r in enumerate(results) if i != 10)
    assert await store.count_messages(session.id) == 30


async def test_a_cancelled_caller_does_not_undo_its_queued_write(store: SQLiteStore) -> None:
    session = await store.ensure_active_session("main")
    tasks = [asyncio.create_task(store.add_user_message(session.id, f"m{n}")) for n in range(20)]
    await asyncio.sleep(0)  # queued, not yet answered
    for task in tasks[::2]:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    # Once queued, a write runs to its end: the caller missed the answer, the row is there.
    assert await store.count_messages(session.id) == 20


async def test_a_store_closed_with_writes_queued_answers_every_one(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    await store.open()
    session = await store.ensure_active_session("main")
    writes = [asyncio.ensure_future(store.add_user_message(session.id, f"m{n}")) for n in range(50)]
    await asyncio.sleep(0)
    await store.close()
    results = await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), 10)
    # Queued before the close: written, and answered; none is left waiting for ever.
    assert all(isinstance(r, int) for r in results), results


async def test_closing_leaves_one_file_with_everything_in_it(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    await store.open()
    session = await store.ensure_active_session("main")
    await asyncio.gather(*(store.add_user_message(session.id, f"m{n}") for n in range(100)))
    await store.count_messages(session.id)  # the reader has a connection open too
    await store.close()
    # The WAL was checkpointed and removed: a copy of the file alone is the whole database.
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 100
    raw.close()


async def test_writes_run_on_the_event_loop_without_a_trip_to_a_thread(store: SQLiteStore) -> None:
    engine = engine_of(store)
    session = await store.ensure_active_session("main")
    threads: list[int] = []

    def record(conn: Conn) -> None:
        threads.append(threading.get_ident())

    before = engine.trips.thread_jobs
    await asyncio.gather(store._write(record), store.add_user_message(session.id, "hi"))
    assert threads == [threading.get_ident()]
    assert engine.trips.thread_jobs == before


async def test_a_quick_read_sees_the_writes_queued_before_it(store: SQLiteStore) -> None:
    session = await store.ensure_active_session("main")
    write = asyncio.ensure_future(store.add_user_message(session.id, "queued"))
    await asyncio.sleep(0)  # queued on the loop, its commit not yet due
    context = await store.run_context(session.id, "main", 10, 10)
    assert [r.content for r in context.rows] == ["queued"]
    await write


async def test_a_lock_held_by_another_process_never_blocks_the_loop_and_keeps_the_order(
    store: SQLiteStore, db_path: Path
) -> None:
    engine = engine_of(store)
    session = await store.ensure_active_session("main")
    locked, release = threading.Event(), threading.Event()

    def other_process() -> None:
        # Another connection (as another process would) holds the write lock for a while.
        with sqlite3.connect(db_path, isolation_level=None) as other:
            other.execute("BEGIN IMMEDIATE")
            locked.set()
            release.wait(10)
            other.execute("COMMIT")
        other.close()

    holder = threading.Thread(target=other_process)
    holder.start()
    assert await asyncio.to_thread(locked.wait, 5)
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        first = asyncio.gather(*(store.add_user_message(session.id, f"a{n}") for n in range(10)))
        await asyncio.sleep(0.3)  # the lock is still held: the writes wait on the writer thread
        assert not first.done()
        second = asyncio.gather(*(store.add_user_message(session.id, f"b{n}") for n in range(10)))
        await asyncio.sleep(0.1)
        release.set()
        await asyncio.wait_for(asyncio.gather(first, second), 10)
    finally:
        release.set()
        ticker.cancel()
        await asyncio.to_thread(holder.join)
    # The loop kept turning while the lock was held (no 5 s busy wait on it) ...
    assert gaps and max(gaps) < 0.25, max(gaps)
    # ... and the writes that came later were not let past the ones waiting for the lock.
    contents = [m.content for m in await store.history(session.id, 100)]
    assert contents == [f"a{n}" for n in range(10)] + [f"b{n}" for n in range(10)]
    # Once the thread has caught up, writes are made on the loop again.
    before = engine.trips.thread_jobs
    await store.add_user_message(session.id, "after")
    assert engine.trips.thread_jobs == before


async def test_a_slow_write_runs_on_the_writer_thread_in_its_place(store: SQLiteStore) -> None:
    session = await store.ensure_active_session("main")
    seen: list[int] = []
    threads: list[int] = []

    def sweep(conn: Conn) -> None:
        threads.append(threading.get_ident())
        seen.append(conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])

    results = await asyncio.gather(
        store.add_user_message(session.id, "before"),
        store._write(sweep, slow=True),
        store.add_user_message(session.id, "after"),
    )
    assert len(results) == 3
    assert threads and threads[0] != threading.get_ident()
    # It saw the write queued before it, and the one queued after it landed after it.
    assert seen == [1]
    assert [m.content for m in await store.history(session.id, 10)] == ["before", "after"]


async def test_the_loop_never_checkpoints_and_the_writer_thread_does(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bridge.store.sqlite.engine as sqlite_engine

    engine = engine_of(store)
    assert await engine.on_writer(lambda conn: conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]) == 0
    checkpoints: list[int] = []
    real = sqlite_engine._checkpoint

    def counted(conn: sqlite3.Connection) -> None:
        checkpoints.append(threading.get_ident())
        real(conn)

    monkeypatch.setattr(sqlite_engine, "CHECKPOINT_EVERY", 10)
    monkeypatch.setattr(sqlite_engine, "_checkpoint", counted)
    session = await store.ensure_active_session("main")
    for n in range(45):
        await store.add_user_message(session.id, f"m{n}")
    await store._write(lambda conn: None, slow=True)  # the writer thread has done what it was given
    assert len(checkpoints) == 4
    assert threading.get_ident() not in checkpoints
