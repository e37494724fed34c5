"""The /voice choice on a session: stored, read back through the cache, kept across /clear, on both
backends (the PostgreSQL migration also re-creates the trigger that tells other workers)."""

from __future__ import annotations

from bridge.store.tables import DatabaseStore


async def test_the_voice_choice_is_stored_and_kept_across_a_new_session(store: DatabaseStore) -> None:
    first = await store.ensure_active_session("telegram:dm:7")
    assert first.voice_replies is None
    await store.set_voice_replies(first.id, "off")
    assert (await store.active_session("telegram:dm:7")).voice_replies == "off"  # type: ignore[union-attr]
    store.forget_session("telegram:dm:7")  # read from the database, not the cache
    assert (await store.active_session("telegram:dm:7")).voice_replies == "off"  # type: ignore[union-attr]
    second = await store.start_new_session("telegram:dm:7")
    assert second.id != first.id and second.voice_replies == "off"
    await store.set_voice_replies(second.id, None)
    store.forget_session("telegram:dm:7")
    assert (await store.active_session("telegram:dm:7")).voice_replies is None  # type: ignore[union-attr]
    assert (await store.get_session(first.id)).voice_replies == "off"  # type: ignore[union-attr]
