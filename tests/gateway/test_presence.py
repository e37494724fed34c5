"""A worker ends the connections of another that has gone silent, judged by its own clock."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from bridge.errors import StoreError
from bridge.gateway import presence
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


async def test_a_watcher_held_up_itself_judges_no_one_silent_for_that_time(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock or a stalled server holds every worker's beat up at once: the first to get through must
    not take the others, still held up, for silent."""
    monkeypatch.setattr(presence, "LOOK_GAP_S", SILENT_S / 2)
    url = postgres.database()
    store = PostgresStore(url, application_name="bridge-watcher")
    await store.open()
    conn = psycopg.connect(url, autocommit=True, application_name="bridge-held-pool")
    try:
        watcher = Presence(store, "watcher", silent_after_s=SILENT_S)
        await store.register_worker("held", role="active", holds="runs")
        assert await watcher.end_silent() == []
        # This watcher's next look comes late, past the silence: the other is seen afresh.
        await asyncio.sleep(SILENT_S * 1.5)
        assert await watcher.end_silent() == []
        assert alive(conn)
        # Looks in time again, and the other still silent: now it is judged.
        ended: list[str] = []
        deadline = time.monotonic() + SILENT_S * 2
        while time.monotonic() < deadline and not ended:
            ended += await watcher.end_silent()
            await asyncio.sleep(SILENT_S / 8)
        assert ended == ["held"]
        assert not alive(conn)
    finally:
        conn.close()
        await store.close()


async def test_a_worker_the_server_will_not_let_this_one_signal_is_a_clear_error(
    postgres: PostgresServer,
) -> None:
    url = postgres.database()
    database = url.rsplit("/", 1)[1]
    watcher_role, other_role = f"watcher_{database}", f"other_{database}"
    with psycopg.connect(url, autocommit=True) as admin:
        for role in (watcher_role, other_role):
            admin.execute(f"CREATE ROLE {role} LOGIN".encode())
        # The watcher's own database, as a worker's is; the other connects as another role.
        admin.execute(f"ALTER DATABASE {database} OWNER TO {watcher_role}".encode())
        admin.execute(f"ALTER SCHEMA public OWNER TO {watcher_role}".encode())
    store = PostgresStore(url.replace("bridge@", f"{watcher_role}@"), application_name="bridge-watcher")
    await store.open()
    other = psycopg.connect(
        url.replace("bridge@", f"{other_role}@"), autocommit=True, application_name="bridge-other-pool"
    )
    try:
        watcher = Presence(store, "watcher", silent_after_s=0.0)
        await store.register_worker("other", role="active", holds="runs")
        assert await watcher.end_silent() == []
        with pytest.raises(StoreError) as refused:
            await watcher.end_silent()
        assert "refused to end worker other's connections" in str(refused.value)
        assert "pg_signal_backend" in (refused.value.remedy or "")
        assert alive(other)
    finally:
        other.close()
        await store.close()
