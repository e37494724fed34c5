"""SQLite's writer commits the writes waiting together, and one write's failure stays its own."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bridge.errors import StoreError
from bridge.store.engine import Conn
from bridge.store.sqlite import SQLiteStore
from bridge.store.sqlite_engine import SQLiteEngine

# `store` is the SQLite one here: these are about SQLite's writer thread.
pytestmark = pytest.mark.sqlite_only


async def commits_during(store: SQLiteStore, work: Any) -> int:
    """How many COMMITs the writer ran while `work` was awaited."""
    engine = store.engine
    assert isinstance(engine, SQLiteEngine)
    statements: list[str] = []
    writer = engine._open_writer()
    await engine._call(writer, "raw", lambda conn: conn.set_trace_callback(statements.append))
    try:
        await work
    finally:
        await engine._call(writer, "raw", lambda conn: conn.set_trace_callback(None))
    return sum(1 for s in statements if s == "COMMIT")


async def test_writes_waiting_together_share_one_commit(store: SQLiteStore) -> None:
    session = await store.ensure_active_session("main")
    writes = asyncio.gather(*(store.add_user_message(session.id, f"m{n}") for n in range(200)))
    commits = await commits_during(store, writes)
    assert await store.count_messages(session.id) == 200
    # All 200 were queued before the writer came free: far fewer commits than writes.
    assert 1 <= commits < 20, commits
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
