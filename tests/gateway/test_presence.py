"""A worker ends the connections of another that has gone silent, judged by its own clock."""

from __future__ import annotations

import asyncio
import time

import psycopg

from bridge.gateway.presence import Presence
from bridge.store.postgres import PostgresStore
from bridge.store.sqlite import SQLiteStore
from tests.pg import PostgresServer

SILENT_S = 0.4


def alive(conn: psycopg.Connection[tuple[int]]) -> bool:
    try:
        conn.execute(b"SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


async def test_a_silent_worker_has_every_connection_ended_once_and_a_beating_one_none(
    postgres: PostgresServer,
) -> None:
    url = postgres.database()
    store = PostgresStore(url, application_name="bridge-watcher")
    await store.open()
    # Two other workers' connections, named as theirs are: the pool's, a claim's, the leases'.
    theirs = {
        worker: [
            psycopg.connect(url, autocommit=True, application_name=f"bridge-{worker}{suffix}")
            for suffix in ("-pool", "-claim", "")
        ]
        for worker in ("silent", "beating")
    }
    # A worker whose id begins like another's is not taken for it.
    lookalike = psycopg.connect(url, autocommit=True, application_name="bridge-silentx")
    try:
        watcher = Presence(store, "watcher", silent_after_s=SILENT_S)
        await watcher.start()
        for worker in ("silent", "beating"):
            await store.register_worker(worker, role="active", holds="runs")
        # First seen now: whatever its `seen_at` says (another machine's clock), it is not judged yet.
        assert await watcher.end_silent() == []
        ended: list[str] = []
        deadline = time.monotonic() + SILENT_S * 3
        while time.monotonic() < deadline:
            await store.beat_worker("beating", role="active", holds="runs", sole=False)
            ended += await watcher.end_silent()
            await asyncio.sleep(SILENT_S / 4)
        # The silent one's connections were ended in that time, all three, once; the other's live on.
        assert ended == ["silent"]
        assert not any(alive(conn) for conn in theirs["silent"])
        assert all(alive(conn) for conn in theirs["beating"])
        assert alive(lookalike)
        assert await watcher.end_silent() == []
        # The watcher's own connections are untouched.
        assert len(await store.workers()) == 3
        await watcher.stop()
    finally:
        for conn in (*theirs["silent"], *theirs["beating"], lookalike):
            conn.close()
        await store.close()


async def test_on_sqlite_there_is_no_other_process_to_end(store: SQLiteStore) -> None:
    await store.register_worker("gone", role="active", holds="runs")
    watcher = Presence(store, "watcher", silent_after_s=0.0)
    assert await watcher.end_silent() == []
    assert await watcher.end_silent() == []
