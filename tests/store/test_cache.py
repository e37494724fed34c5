"""The active-session cache: bounded, exact for this process's writes, short-lived for others'."""

from __future__ import annotations

from pathlib import Path

from bridge.store.base import SessionRow
from bridge.store.cache import TOLD_MAX_AGE_S, ActiveSessions
from bridge.store.sqlite import SQLiteStore


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_clear_by_another_process_is_seen_once_the_entry_is_older_than_its_age(
    db_path: Path,
) -> None:
    clock = Clock()
    bot = SQLiteStore(db_path, sessions=ActiveSessions(max_age_s=1.0, clock=clock))
    console = SQLiteStore(db_path)  # `bridge chat` beside `bridge run`, on the same file
    await bot.open()
    await console.open()
    try:
        before = await bot.ensure_active_session("main")
        after = await console.start_new_session("main")
        clock.now = 0.5
        assert await bot.active_session("main") == before  # served from memory, within its age
        clock.now = 1.5
        assert await bot.active_session("main") == after
    finally:
        await console.close()
        await bot.close()


async def test_this_process_writes_are_seen_at_once(store: SQLiteStore) -> None:
    first = await store.ensure_active_session("telegram:dm:1")
    await store.set_send_policy(first.id, "deny")
    cached = await store.active_session("telegram:dm:1")
    assert cached is not None and cached.send_policy == "deny"
    await store.add_user_message(first.id, "hello")
    touched = await store.active_session("telegram:dm:1")
    assert touched is not None and touched.updated_at > first.updated_at
    second = await store.start_new_session("telegram:dm:1")
    assert await store.active_session("telegram:dm:1") == second


async def test_the_cache_keeps_only_the_most_recently_used_sessions(store: SQLiteStore) -> None:
    cache = ActiveSessions(size=2)
    rows = [await store.ensure_active_session(f"telegram:dm:{n}") for n in range(3)]
    for row in rows[:2]:
        cache.put(row)
    assert cache.get(rows[0].key) == rows[0]  # now the most recent
    cache.put(rows[2])
    assert cache.get(rows[1].key) is None
    assert cache.get(rows[0].key) == rows[0] and cache.get(rows[2].key) == rows[2]
    cache.update(rows[1].id, send_policy="deny")  # not held: nothing to do, nothing raised


def test_once_changes_are_told_copies_read_before_go_and_later_ones_are_trusted_longer() -> None:
    clock = Clock()
    cache = ActiveSessions(max_age_s=1.0, clock=clock)
    cache.put(SessionRow("a", "telegram:dm:1", 0.0, 0.0))
    cache.told(True)
    assert cache.get("telegram:dm:1") is None  # read when a change could go untold
    cache.put(SessionRow("a", "telegram:dm:1", 0.0, 0.0))
    clock.now = TOLD_MAX_AGE_S - 1
    assert cache.get("telegram:dm:1") is not None
    cache.told(False)  # the listener's connection failed: changes may go untold again
    assert cache.get("telegram:dm:1") is None
    cache.put(SessionRow("a", "telegram:dm:1", 0.0, 0.0))
    clock.now += 1.5
    assert cache.get("telegram:dm:1") is None
