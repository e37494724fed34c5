"""The /agent choice on a session: stored, read back through the cache, kept across /clear, on both
backends (the PostgreSQL migration also re-creates the trigger that tells other workers)."""

from __future__ import annotations

from bridge.store.tables import DatabaseStore

KEY = "telegram:group:-100"


async def test_the_agent_choice_is_stored_and_kept_across_a_new_session(store: DatabaseStore) -> None:
    first = await store.ensure_active_session(KEY)
    assert first.agent is None
    await store.set_agent(first.id, "support")
    assert (await store.active_session(KEY)).agent == "support"  # type: ignore[union-attr]
    store.forget_session(KEY)  # read from the database, not the cache
    assert (await store.active_session(KEY)).agent == "support"  # type: ignore[union-attr]
    second = await store.start_new_session(KEY)
    assert second.id != first.id and second.agent == "support"
    await store.set_agent(second.id, None)
    store.forget_session(KEY)
    assert (await store.active_session(KEY)).agent is None  # type: ignore[union-attr]
    assert (await store.get_session(first.id)).agent == "support"  # type: ignore[union-attr]
