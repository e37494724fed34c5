"""Webhook events on both backends: stored once per event key, even when two arrive at once; claimed
by one run; listed by state."""

from __future__ import annotations

import asyncio

from bridge.store.hooks import HOOK_STATES
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
