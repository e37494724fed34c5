"""Webhook events on both backends: stored once per event key, even when two arrive at once; claimed
by one run; listed by state."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bridge.store.hooks import HOOK_STATES, Nonce
from bridge.store.postgres import PostgresStore
from bridge.store.sqlite import SQLiteStore
from bridge.store.tables import DatabaseStore

NOW = 1_800_000_000.0


async def add(store: DatabaseStore, key: str | None, hook: str = "deploys") -> tuple[int, bool]:
    event, new = await store.add_hook_event(hook, key, f"hook:{hook}", "main", "say hi", NOW)
    return event.id, new


async def test_an_event_with_a_key_stored_before_is_found_not_stored_again(store: DatabaseStore) -> None:
    first, new = await add(store, "evt-1")
    again, again_new = await add(store, "evt-1")
    assert new and not again_new and again == first
    # The key belongs to its hook: another hook's event with the same key is its own.
    other, other_new = await add(store, "evt-1", hook="builds")
    assert other_new and other != first


async def test_events_without_a_key_are_all_stored(store: DatabaseStore) -> None:
    ids = {(await add(store, None))[0] for _ in range(3)}
    assert len(ids) == 3


async def test_two_deliveries_of_one_event_at_the_same_moment_store_it_once(store: DatabaseStore) -> None:
    results = await asyncio.gather(*(add(store, "same") for _ in range(8)))
    assert sorted(new for _, new in results) == [False] * 7 + [True]
    assert len({event_id for event_id, _ in results}) == 1
    assert len(await store.hook_events_in(("pending",))) == 1


async def test_an_event_is_claimed_by_one_run_and_its_end_recorded(store: DatabaseStore) -> None:
    event_id, _ = await add(store, "e")
    claims = await asyncio.gather(*(store.claim_hook_event(event_id, f"r{n}", NOW + 1) for n in range(5)))
    assert sorted(claims) == [False] * 4 + [True]
    (running,) = await store.hook_events_in(("running",))
    assert running.run_id is not None and running.started_at == NOW + 1
    assert await store.hook_events_in(("pending",)) == []
    await store.finish_hook_event(event_id, "ok", NOW + 2, None)
    (done,) = await store.hook_events_in(HOOK_STATES)
    assert (done.state, done.ended_at, done.run_id) == ("ok", NOW + 2, running.run_id)
    assert await store.hook_events_in(("pending", "running")) == []


async def add_signed(
    store: DatabaseStore, signature: str, key: str | None = None, now: float = NOW
) -> bool | None:
    """Whether the event was new; None when the signature was taken before (a replay)."""
    stored = await store.add_signed_hook_event(
        Nonce(signature, NOW + 300), "deploys", key, "hook:deploys", "main", "say hi", now
    )
    return None if stored is None else stored[1]


async def test_a_signature_is_taken_once_and_a_replay_stores_nothing(store: DatabaseStore) -> None:
    assert await add_signed(store, "sha256=aa") is True
    assert await add_signed(store, "sha256=aa") is None
    # Another signature of one event (the sender's retry, signed again) is a redelivery, not a replay.
    assert await add_signed(store, "sha256=bb", key="evt") is True
    assert await add_signed(store, "sha256=cc", key="evt") is False
    assert len(await store.hook_events_in(("pending",))) == 2
    # The signature belongs to its hook.
    other = await store.add_signed_hook_event(
        Nonce("sha256=aa", NOW + 300), "builds", None, "hook:builds", "main", "say hi", NOW
    )
    assert other is not None and other[1]


async def test_of_copies_sent_at_once_to_several_workers_one_is_taken(store: DatabaseStore) -> None:
    results = await asyncio.gather(*(add_signed(store, "sha256=same") for _ in range(8)))
    assert sorted(results, key=str) == [None] * 7 + [True]
    assert len(await store.hook_events_in(("pending",))) == 1


async def test_a_signature_expires_with_its_window_and_is_forgotten(store: DatabaseStore) -> None:
    assert await add_signed(store, "sha256=old") is True
    # Past its expiry (its timestamp is stale by then, and refused before the store is asked), the
    # row is gone, deleted by the next request: the table does not grow with the hook's traffic.
    assert await add_signed(store, "sha256=new", now=NOW + 301) is True
    rows = await store._rows("SELECT signature FROM hook_signatures")
    assert [row[0] for row in rows] == ["sha256=new"]


async def test_a_signature_taken_by_one_worker_is_a_replay_for_another_and_after_a_restart(
    backend: str, db_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "postgresql":
        url = request.getfixturevalue("postgres").database()
        first: DatabaseStore = PostgresStore(url, pool_size=2)
        second: DatabaseStore = PostgresStore(url, pool_size=2)
    else:
        first, second = SQLiteStore(db_path), SQLiteStore(db_path)
    await first.open()
    await second.open()
    try:
        assert await add_signed(first, "sha256=one") is True
        assert await add_signed(second, "sha256=one") is None
    finally:
        await first.close()
        await second.close()
    restarted = SQLiteStore(db_path) if backend == "sqlite" else PostgresStore(url, pool_size=2)
    await restarted.open()
    try:
        assert await add_signed(restarted, "sha256=one") is None
    finally:
        await restarted.close()
