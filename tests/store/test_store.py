"""The store's contract on both backends (SQLite and a real PostgreSQL), and SQLite's file handling."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from bridge.errors import StoreError
from bridge.store import messages as messages_module
from bridge.store.base import OutboxItem, SessionMeta, SessionRow, ToolExchange
from bridge.store.claims import CLAIM_CHECK_S, TAKEOVER_GRACE_S
from bridge.store.messages import dumps
from bridge.store.sqlite import SQLiteStore
from bridge.store.sqlite import engine as sqlite_module
from bridge.store.sqlite.engine import SQLiteEngine
from bridge.store.sqlite.migrations import MIGRATIONS, SCHEMA_VERSION
from bridge.store.tables import DatabaseStore
from tests.corruption import damage
from tests.waiting import stall

T = TypeVar("T")
# What each backend raises when a constraint refuses a row.
INTEGRITY_ERRORS = (sqlite3.IntegrityError, psycopg.IntegrityError)


def names_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def scalar(store: DatabaseStore, sql: str, params: tuple[Any, ...] = ()) -> Any:
    return await store._scalar(sql, params)


async def execute(store: DatabaseStore, sql: str, params: tuple[Any, ...] = ()) -> None:
    """One statement as a write transaction of its own, bypassing the store's methods."""
    await store._write(lambda conn: conn.execute(sql, params))


async def on_writer(store: DatabaseStore, fn: Callable[[sqlite3.Connection], T]) -> T:
    """`fn` on the connection the writes are made on, outside any transaction the engine opens."""
    engine = store.engine
    assert isinstance(engine, SQLiteEngine)
    return await engine.on_writer(fn)


def exchange(
    call_id: str,
    tool_input: Any,
    *,
    tool_name: str = "load_tool_group",
    status: str = "success",
    result: str = "ok",
) -> ToolExchange:
    raw = tool_input if isinstance(tool_input, str) else dumps(tool_input)
    return ToolExchange(call_id, tool_name, raw, result, status, step=0)


async def load(store: DatabaseStore, session: SessionRow, group: Any, *, status: str = "success") -> None:
    """Record a load_tool_group call in the session's history, as the runner does."""
    call_id = f"c{await store.count_messages(session.id)}"
    await store.add_tool_exchange(session.id, "r1", exchange(call_id, {"group_name": group}, status=status))


async def insert_load_call(store: DatabaseStore, session_id: str, tool_input: str | None) -> None:
    """A load_tool_group call row written by hand, bypassing the store's JSON encoding."""
    await execute(
        store,
        "INSERT INTO messages (session_id, kind, content, tool_name, tool_input, tool_status, created_at) "
        "VALUES (?, 'tool_call', '', 'load_tool_group', ?, 'success', 0)",
        (session_id, tool_input),
    )


# ---------------------------------------------------------------------------------------------- opening


@pytest.mark.sqlite_only
async def test_open_sets_wal_foreign_keys_and_schema_version(store: DatabaseStore, db_path: Path) -> None:
    assert db_path.name in names_in(db_path.parent)
    assert await scalar(store, "PRAGMA journal_mode") == "wal"
    # Enforced where the writes are made.
    assert await on_writer(store, lambda conn: conn.execute("PRAGMA foreign_keys").fetchone()[0]) == 1
    assert await scalar(store, "PRAGMA user_version") == SCHEMA_VERSION


async def test_foreign_keys_are_enforced(store: DatabaseStore) -> None:
    with pytest.raises(INTEGRITY_ERRORS):
        await store.start_run("r", "no-such-session", None, "h")


@pytest.mark.sqlite_only
async def test_reopening_keeps_data_and_does_not_rerun_migrations(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = SQLiteStore(db_path)
    await first.open()
    session = await first.ensure_active_session("main")
    await first.add_user_message(session.id, "remember me")
    await first.close()

    # Were a shipped migration run again, this statement would fail the open.
    monkeypatch.setattr(sqlite_module, "MIGRATIONS", ("THIS IS NOT SQL;",) * SCHEMA_VERSION)
    second = SQLiteStore(db_path)
    await second.open()
    try:
        assert await scalar(second, "PRAGMA user_version") == SCHEMA_VERSION
        restored = await second.active_session("main")
        assert restored is not None
        assert restored.id == session.id
        assert [m.content for m in await second.history(session.id, 10)] == ["remember me"]
    finally:
        await second.close()


@pytest.mark.sqlite_only
async def test_a_new_migration_runs_once_on_an_existing_database(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = SQLiteStore(db_path)
    await first.open()
    await first.close()

    added = "CREATE TABLE extra (id INTEGER PRIMARY KEY);"
    monkeypatch.setattr(sqlite_module, "MIGRATIONS", (*MIGRATIONS, added))
    monkeypatch.setattr(sqlite_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    for _ in range(2):  # the second open finds version + 1 and must not create the table again
        store = SQLiteStore(db_path)
        await store.open()
        try:
            assert await scalar(store, "PRAGMA user_version") == SCHEMA_VERSION + 1
            assert await scalar(store, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'extra'") == 1
        finally:
            await store.close()


@pytest.mark.sqlite_only
async def test_database_newer_than_this_bridge_is_refused_naming_both_versions(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    newer = SCHEMA_VERSION + 5
    with sqlite3.connect(db_path) as raw:
        raw.execute(f"PRAGMA user_version = {newer}")
    raw.close()

    store = SQLiteStore(db_path)
    with pytest.raises(StoreError) as info:
        await store.open()
    message = str(info.value)
    assert f"schema version {newer}" in message
    assert f"({SCHEMA_VERSION})" in message
    assert str(db_path) in message
    # The refused store is closed, not left holding a connection (and its thread).
    with pytest.raises(StoreError, match="not open"):
        await store.count_messages("any")
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == newer
        assert raw.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0
        # Refused before anything was written: the journal mode was not switched to WAL either.
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    raw.close()


@pytest.mark.sqlite_only
async def test_file_that_is_not_a_database_gives_store_error_and_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    original = b"these are my notes, not a database\n" * 200
    path.write_bytes(original)

    store = SQLiteStore(path)
    with pytest.raises(StoreError) as info:
        await store.open()
    assert str(path) in str(info.value)
    assert path.read_bytes() == original
    assert names_in(tmp_path) == ["notes.db"]  # no -wal or -shm left behind
    with pytest.raises(StoreError):
        await store.count_messages("any")


@pytest.mark.sqlite_only
async def test_closing_twice_is_harmless(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    await store.open()
    await store.close()
    await store.close()
    with pytest.raises(StoreError, match="not open"):
        await store.active_session("main")


# --------------------------------------------------------------------------------------------- sessions


async def test_ensure_active_session_returns_the_same_row_twice(store: DatabaseStore) -> None:
    first = await store.ensure_active_session("main")
    second = await store.ensure_active_session("main")
    assert first == second
    assert first.active
    assert await scalar(store, "SELECT COUNT(*) FROM sessions") == 1


async def test_ensure_active_session_merges_new_meta_into_the_row(store: DatabaseStore) -> None:
    first = await store.ensure_active_session("main", SessionMeta(surface="telegram", display_name="Ann"))
    second = await store.ensure_active_session("main", SessionMeta(last_route="telegram:1"))
    assert second.id == first.id
    assert (second.surface, second.display_name, second.last_route) == ("telegram", "Ann", "telegram:1")


async def test_start_new_session_ends_the_previous_one_and_keeps_its_messages(store: DatabaseStore) -> None:
    old = await store.ensure_active_session("main", SessionMeta(surface="telegram"))
    await store.add_user_message(old.id, "hello")
    await store.add_assistant_message(old.id, None, "hi")

    new = await store.start_new_session("main")

    assert new.id != old.id
    assert new.active
    assert new.surface == "telegram"  # meta carries over when none is given
    assert await store.active_session("main") == new
    ended = await store.get_session(old.id)
    assert ended is not None
    assert ended.ended_at is not None
    assert not ended.active
    assert [m.content for m in await store.history(old.id, 10)] == ["hello", "hi"]
    assert await store.count_messages(new.id) == 0
    assert await store.history(new.id, 10) == []


async def test_start_new_session_for_an_unseen_key_creates_one(store: DatabaseStore) -> None:
    created = await store.start_new_session("cron:daily")
    assert await store.active_session("cron:daily") == created


async def test_partial_unique_index_rejects_a_second_active_row_for_a_key(store: DatabaseStore) -> None:
    await store.ensure_active_session("main")
    insert = "INSERT INTO sessions (id, key, created_at, updated_at, ended_at) VALUES (?, 'main', 0, 0, ?)"
    with pytest.raises(INTEGRITY_ERRORS):
        await execute(store, insert, ("second-active", None))
    # Ended rows for the same key are fine: the index only covers active sessions.
    await execute(store, insert, ("ended", 1.0))
    assert await scalar(store, "SELECT COUNT(*) FROM sessions WHERE key = 'main'") == 2


async def test_get_session_of_unknown_id_is_none(store: DatabaseStore) -> None:
    assert await store.get_session("nope") is None
    assert await store.active_session("nope") is None


# --------------------------------------------------------------------------------------------- messages


async def test_redelivered_platform_message_is_stored_once(store: DatabaseStore, session: SessionRow) -> None:
    first = await store.add_user_message(session.id, "hi", sender="telegram:1", platform_msg_id="tg:1:5")
    again = await store.add_user_message(session.id, "hi", sender="telegram:1", platform_msg_id="tg:1:5")
    assert isinstance(first, int)
    assert again is None
    assert await store.count_messages(session.id) == 1
    [row] = await store.history(session.id, 10)
    assert (row.kind, row.content, row.sender) == ("user", "hi", "telegram:1")


async def test_user_messages_without_platform_id_are_never_deduplicated(
    store: DatabaseStore, session: SessionRow
) -> None:
    assert await store.add_user_message(session.id, "same") is not None
    assert await store.add_user_message(session.id, "same") is not None
    assert await store.count_messages(session.id) == 2


async def test_adding_a_message_to_an_unknown_session_is_an_error_not_a_duplicate(
    store: DatabaseStore,
) -> None:
    with pytest.raises(INTEGRITY_ERRORS):
        await store.add_user_message("no-such-session", "hi", platform_msg_id="x:1:1")


async def test_tool_exchange_writes_call_and_result_together(
    store: DatabaseStore, session: SessionRow
) -> None:
    await store.add_tool_exchange(
        session.id,
        "r1",
        ToolExchange("call-1", "get_current_time", '{"timezone":"UTC"}', "12:00", "success", 2, "Let me see"),
    )
    call, result = await store.history(session.id, 10)
    assert (call.kind, call.content, call.tool_input) == ("tool_call", "Let me see", '{"timezone":"UTC"}')
    assert (result.kind, result.content, result.tool_input) == ("tool_result", "12:00", None)
    for row in (call, result):
        assert (row.run_id, row.step, row.tool_name) == ("r1", 2, "get_current_time")
        assert (row.tool_call_id, row.tool_status) == ("call-1", "success")


@pytest.mark.sqlite_only
async def test_failed_result_insert_leaves_neither_row_and_store_stays_usable(
    store: DatabaseStore, session: SessionRow, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = messages_module.insert_message
    calls = 0

    def fail_second(*args: Any, **kwargs: Any) -> int | None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise sqlite3.OperationalError("disk I/O error")
        return original(*args, **kwargs)

    monkeypatch.setattr(messages_module, "insert_message", fail_second)
    with pytest.raises(StoreError, match="disk I/O error"):
        await store.add_tool_exchange(session.id, "r1", exchange("c1", {"group_name": "web"}))
    assert calls == 2
    assert await store.count_messages(session.id) == 0
    assert not await on_writer(store, lambda conn: conn.in_transaction)
    assert await store.loaded_groups(session.id) == set()

    monkeypatch.undo()
    await store.add_tool_exchange(session.id, "r1", exchange("c2", {"group_name": "web"}))
    assert await store.add_user_message(session.id, "still works") is not None
    assert [m.kind for m in await store.history(session.id, 10)] == ["tool_call", "tool_result", "user"]


async def test_history_returns_the_last_n_rows_oldest_first(
    store: DatabaseStore, session: SessionRow
) -> None:
    for i in range(6):
        if i % 2:
            await store.add_assistant_message(session.id, "r1", f"m{i}")
        else:
            await store.add_user_message(session.id, f"m{i}")
    assert [m.content for m in await store.history(session.id, 3)] == ["m3", "m4", "m5"]
    assert [m.content for m in await store.history(session.id, 100)] == [f"m{i}" for i in range(6)]
    ids = [m.id for m in await store.history(session.id, 100)]
    assert ids == sorted(ids)


async def test_history_is_per_session(store: DatabaseStore, session: SessionRow) -> None:
    other = await store.ensure_active_session("cron:x")
    await store.add_user_message(session.id, "mine")
    await store.add_user_message(other.id, "theirs")
    assert [m.content for m in await store.history(session.id, 10)] == ["mine"]


# ---------------------------------------------------------------------------------------- loaded groups


async def test_successful_group_loads_are_restored(store: DatabaseStore, session: SessionRow) -> None:
    await load(store, session, "web")
    await load(store, session, "files")
    assert await store.loaded_groups(session.id) == {"web", "files"}


async def test_failed_group_load_is_not_restored(store: DatabaseStore, session: SessionRow) -> None:
    await load(store, session, "nonexistent", status="error")
    await load(store, session, "web")
    assert await store.loaded_groups(session.id) == {"web"}


async def test_only_load_tool_group_calls_count(store: DatabaseStore, session: SessionRow) -> None:
    await store.add_tool_exchange(
        session.id, "r1", exchange("c1", {"group_name": "web"}, tool_name="get_current_time")
    )
    await store.add_user_message(session.id, '{"group_name": "files"}')
    assert await store.loaded_groups(session.id) == set()


async def test_malformed_group_load_inputs_are_skipped_without_raising(
    store: DatabaseStore, session: SessionRow
) -> None:
    for raw in (
        "not json {",
        None,
        "",
        '"web"',
        "[]",
        '["web"]',
        "{}",
        '{"group_name": null}',
        '{"group_name": ""}',
        '{"group_name": 7}',
        '{"group_name": true}',
        '{"group_name": ["web"]}',
        '{"group_name": {"name": "web"}}',
    ):
        await insert_load_call(store, session.id, raw)
    assert await store.loaded_groups(session.id) == set()

    await insert_load_call(store, session.id, '{"group_name": "files"}')
    assert await store.loaded_groups(session.id) == {"files"}


async def test_non_string_group_names_are_skipped(store: DatabaseStore, session: SessionRow) -> None:
    for value in (42, 1.5, None, ["web"], {"name": "web"}, False):
        await load(store, session, value)
    await load(store, session, "sessions")
    assert await store.loaded_groups(session.id) == {"sessions"}


async def test_duplicate_group_loads_collapse(store: DatabaseStore, session: SessionRow) -> None:
    for _ in range(3):
        await load(store, session, "web")
    assert await store.loaded_groups(session.id) == {"web"}


async def test_groups_loaded_in_another_session_are_not_included(
    store: DatabaseStore, session: SessionRow
) -> None:
    other = await store.ensure_active_session("telegram:group:-1")
    await store.start_run("r2", other.id, None, "h")
    await store.add_tool_exchange(other.id, "r2", exchange("c1", {"group_name": "files"}))
    await load(store, session, "web")
    assert await store.loaded_groups(session.id) == {"web"}
    assert await store.loaded_groups(other.id) == {"files"}


async def load_skill(
    store: DatabaseStore, session: SessionRow, name: Any, *, status: str = "success"
) -> None:
    """Record a load_skill call in the session's history, as the runner does."""
    call_id = f"c{await store.count_messages(session.id)}"
    await store.add_tool_exchange(
        session.id, "r1", exchange(call_id, {"name": name}, tool_name="load_skill", status=status)
    )


async def test_loaded_skills_are_restored_apart_from_groups_by_one_read(
    store: DatabaseStore, session: SessionRow
) -> None:
    await load(store, session, "web")
    await load_skill(store, session, "pdf-forms")
    await load_skill(store, session, "pdf-forms")
    await load_skill(store, session, "broken", status="error")
    await load_skill(store, session, 7)
    # A group's argument on a skill call (and the other way round) loads nothing.
    await store.add_tool_exchange(
        session.id, "r1", exchange("x1", {"group_name": "files"}, tool_name="load_skill")
    )
    await load(store, session, None)
    loaded = await store.loaded(session.id)
    assert (loaded.groups, loaded.skills) == ({"web"}, {"pdf-forms"})
    assert await store.loaded_groups(session.id) == {"web"}
    assert await store.loaded_skills(session.id) == {"pdf-forms"}


async def test_a_run_context_carries_the_skills_loaded_in_earlier_turns(
    store: DatabaseStore, session: SessionRow
) -> None:
    await load_skill(store, session, "writing")
    first = await store.run_context(session.id, "main", 10, 0)
    assert first.loaded_skills == {"writing"}
    # A later turn: the kept window (SQLite) is topped up with the new load, and reads it too.
    await load_skill(store, session, "pdf-forms")
    await load(store, session, "web")
    later = await store.run_context(session.id, "main", 10, 0)
    assert (later.loaded_groups, later.loaded_skills) == ({"web"}, {"writing", "pdf-forms"})


async def test_skills_do_not_carry_over_to_a_new_session_of_the_same_key(
    store: DatabaseStore, session: SessionRow
) -> None:
    await load_skill(store, session, "writing")
    fresh = await store.start_new_session("main")
    assert await store.loaded_skills(fresh.id) == set()
    assert (await store.run_context(fresh.id, "main", 10, 0)).loaded_skills == set()


async def test_groups_do_not_carry_over_to_a_new_session_of_the_same_key(
    store: DatabaseStore, session: SessionRow
) -> None:
    await load(store, session, "web")
    fresh = await store.start_new_session("main")
    assert await store.loaded_groups(fresh.id) == set()
    assert await store.loaded_groups(session.id) == {"web"}


@pytest.mark.sqlite_only
async def test_loaded_groups_and_skills_are_one_query_on_the_loads_index(
    store: DatabaseStore, session: SessionRow
) -> None:
    for i in range(20):
        await store.add_user_message(session.id, f"filler {i}")
    await load(store, session, "web")
    await load_skill(store, session, "pdf-forms")

    statements: list[str] = []
    # A quick read, made on the loop's connection: the callback goes there.
    await on_writer(store, lambda conn: conn.set_trace_callback(statements.append))
    try:
        loaded = await store.loaded(session.id)
    finally:
        await on_writer(store, lambda conn: conn.set_trace_callback(None))

    assert (loaded.groups, loaded.skills) == ({"web"}, {"pdf-forms"})
    assert len(statements) == 1
    plan = " | ".join(row[3] for row in await store._rows("EXPLAIN QUERY PLAN " + statements[0]))
    assert "USING INDEX messages_loads" in plan, plan
    assert "SCAN messages" not in plan, plan


# ---------------------------------------------------------------------------------------------- search


@pytest.fixture
async def searchable(store: DatabaseStore, session: SessionRow) -> SessionRow:
    await store.add_user_message(session.id, "the 100% solution")
    await store.add_user_message(session.id, "a plain 1000 result")
    await store.add_assistant_message(session.id, "r1", "use snake_case names")
    await store.add_assistant_message(session.id, "r1", "use snakeXcase names")
    await store.add_user_message(session.id, r"path C:\temp\x")
    await store.add_tool_exchange(
        session.id, "r1", exchange("c1", {"q": "snake_case"}, tool_name="webfetch", result="snake_case 100%")
    )
    other = await store.ensure_active_session("cron:other")
    await store.add_user_message(other.id, "other 100% snake_case")
    return session


async def test_search_finds_user_and_assistant_text_in_this_session_only(
    store: DatabaseStore, searchable: SessionRow
) -> None:
    found = await store.search_messages(searchable.id, "SOLUTION", 10)
    assert [(m.kind, m.content) for m in found] == [("user", "the 100% solution")]
    found = await store.search_messages(searchable.id, "names", 10)
    assert [m.content for m in found] == ["use snakeXcase names", "use snake_case names"]  # newest first
    assert all(m.session_id == searchable.id for m in found)


async def test_search_treats_percent_and_underscore_literally(
    store: DatabaseStore, searchable: SessionRow
) -> None:
    assert [m.content for m in await store.search_messages(searchable.id, "100%", 10)] == [
        "the 100% solution"
    ]
    assert [m.content for m in await store.search_messages(searchable.id, "snake_case", 10)] == [
        "use snake_case names"
    ]
    assert [m.content for m in await store.search_messages(searchable.id, "%", 10)] == ["the 100% solution"]
    assert [m.content for m in await store.search_messages(searchable.id, "\\temp", 10)] == [
        r"path C:\temp\x"
    ]


async def test_search_respects_limit(store: DatabaseStore, searchable: SessionRow) -> None:
    assert len(await store.search_messages(searchable.id, "e", 2)) == 2


# -------------------------------------------------------------------------------------------- listings


async def set_updated_at(store: DatabaseStore, session_id: str, when: float) -> None:
    await execute(store, "UPDATE sessions SET updated_at = ? WHERE id = ?", (when, session_id))


async def test_list_sessions_orders_by_updated_at_desc_and_counts_messages(store: DatabaseStore) -> None:
    a = await store.ensure_active_session("main")
    b = await store.ensure_active_session("cron:b")
    c = await store.ensure_active_session("telegram:dm:3")
    for _ in range(3):
        await store.add_user_message(a.id, "x")
    await store.add_user_message(c.id, "y")
    await set_updated_at(store, a.id, 100.0)
    await set_updated_at(store, b.id, 300.0)
    await set_updated_at(store, c.id, 200.0)

    listed = await store.list_sessions(limit=10)
    assert [(s.session.key, s.message_count) for s in listed] == [
        ("cron:b", 0),
        ("telegram:dm:3", 1),
        ("main", 3),
    ]
    assert [s.session.key for s in await store.list_sessions(limit=2)] == ["cron:b", "telegram:dm:3"]


async def test_a_message_moves_its_sessions_updated_at_forward_never_back(store: DatabaseStore) -> None:
    chat = await store.ensure_active_session("telegram:dm:4")
    other = await store.ensure_active_session("telegram:dm:5")
    await set_updated_at(store, chat.id, 100.0)
    await set_updated_at(store, other.id, 100.0)
    await store.add_user_message(chat.id, "now")
    assert await scalar(store, "SELECT updated_at FROM sessions WHERE id = ?", (chat.id,)) > 1_000_000
    assert await scalar(store, "SELECT updated_at FROM sessions WHERE id = ?", (other.id,)) == 100.0
    # A session touched later than its newest message (a copy from another database, say) keeps it.
    future = time.time() + 3600
    await set_updated_at(store, chat.id, future)
    await store.add_user_message(chat.id, "again")
    assert await scalar(store, "SELECT updated_at FROM sessions WHERE id = ?", (chat.id,)) == future


async def test_list_sessions_active_since_filters_by_updated_at(store: DatabaseStore) -> None:
    old = await store.ensure_active_session("main")
    recent = await store.ensure_active_session("cron:b")
    await set_updated_at(store, old.id, 100.0)
    await set_updated_at(store, recent.id, 300.0)
    assert [s.session.id for s in await store.list_sessions(limit=10, active_since=250.0)] == [recent.id]
    assert len(await store.list_sessions(limit=10, active_since=100.0)) == 2


async def test_list_sessions_hides_ended_sessions_unless_asked(store: DatabaseStore) -> None:
    old = await store.ensure_active_session("main")
    new = await store.start_new_session("main")
    assert [s.session.id for s in await store.list_sessions(limit=10)] == [new.id]
    everything = {s.session.id for s in await store.list_sessions(limit=10, active_only=False)}
    assert everything == {old.id, new.id}


async def test_adding_a_message_bumps_the_session_to_the_top(store: DatabaseStore) -> None:
    a = await store.ensure_active_session("main")
    b = await store.ensure_active_session("cron:b")
    await set_updated_at(store, a.id, 100.0)
    await set_updated_at(store, b.id, 200.0)
    await store.add_user_message(a.id, "news")
    assert [s.session.id for s in await store.list_sessions(limit=10)] == [a.id, b.id]


# -------------------------------------------------------------------------------------------- memories


async def test_memories_are_listed_in_order_per_scope_with_limit(store: DatabaseStore) -> None:
    for text in ("one", "two", "three"):
        await store.add_memory("main", text)
    await store.add_memory("telegram:dm:9", "someone else's")

    assert await store.memories("main", 10) == ["one", "two", "three"]
    assert await store.memories("main", 2) == ["two", "three"]  # the latest N, oldest first
    assert await store.memories("telegram:dm:9", 10) == ["someone else's"]
    assert await store.memories("cron:nobody", 10) == []


# ------------------------------------------------------------------------------------------------ runs


async def test_run_round_trip(store: DatabaseStore, session: SessionRow) -> None:
    await store.start_run("r2", session.id, "telegram", "abc")
    started = await store.get_run("r2")
    assert started is not None
    assert (started.session_id, started.status, started.channel, started.input_hash) == (
        session.id,
        "running",
        "telegram",
        "abc",
    )
    assert started.ended_at is None
    assert started.started_at > 0

    await store.finish_run("r2", "error", iterations=3, prompt_tokens=120, completion_tokens=45, error="boom")
    done = await store.get_run("r2")
    assert done is not None
    assert (done.status, done.iterations, done.prompt_tokens, done.completion_tokens, done.error) == (
        "error",
        3,
        120,
        45,
        "boom",
    )
    assert done.ended_at is not None
    assert done.ended_at >= done.started_at


async def test_unknown_run_is_none(store: DatabaseStore) -> None:
    assert await store.get_run("missing") is None


@pytest.mark.sqlite_only
async def test_a_version_one_database_is_upgraded_in_place_keeping_its_sessions(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db_path) as raw:
        raw.executescript(MIGRATIONS[0])
        raw.execute("PRAGMA user_version = 1")
        raw.execute("INSERT INTO sessions (id, key, created_at, updated_at) VALUES ('old', 'main', 1, 1)")
    raw.close()
    store = SQLiteStore(db_path)
    await store.open()
    try:
        old = await store.get_session("old")
        thread = await store.ensure_active_session("discord:channel:9", SessionMeta(parent_id="8"))
        version = await store._scalar("PRAGMA user_version")
    finally:
        await store.close()
    assert old is not None and old.parent_id is None
    assert thread.parent_id == "8"
    assert version == SCHEMA_VERSION == len(MIGRATIONS)


# -- outbox ----------------------------------------------------------------------------------


def outbox_item(**fields: Any) -> OutboxItem:
    base: dict[str, Any] = {
        "kind": "reply",
        "surface": "telegram",
        "chat_id": "1",
        "text": "hi",
        "state": "pending",
    }
    return OutboxItem(**{**base, **fields})


async def test_a_failed_reply_is_reopened_once_however_many_ask(store: DatabaseStore) -> None:
    reply, activity = await store.add_outbox(outbox_item(), outbox_item(kind="activity", text="⚙ x"))
    for row_id in (reply, activity):
        await store.mark_outbox(row_id, "failed", reason="the platform said no")
    reopened = await asyncio.gather(*(store.reopen_failed(reply, "retried") for _ in range(5)))
    won = [row for row in reopened if row is not None]
    assert len(won) == 1
    assert (won[0].id, won[0].item.state, won[0].item.reason) == (reply, "pending", "retried")
    # Tool activity is never sent late; a row not failed is not reopened.
    assert await store.reopen_failed(activity, "retried") is None
    assert await store.reopen_failed(reply, "again") is None
    assert [row.id for row in await store.outbox(state="failed")] == [activity]


async def test_an_outbox_item_moves_from_pending_to_sent_with_its_message_id(store: DatabaseStore) -> None:
    session = await store.ensure_active_session("main")
    [item_id] = await store.add_outbox(outbox_item(session_id=session.id, session_key="main"))
    await store.mark_outbox(item_id, "sending")
    await store.mark_outbox(item_id, "sent", platform_msg_id="99")
    [row] = await store.outbox(session_id=session.id)
    assert (row.item.state, row.platform_msg_id, row.item.session_key) == ("sent", "99", "main")


async def test_an_item_with_a_used_dedupe_key_is_refused(store: DatabaseStore) -> None:
    assert len(await store.add_outbox(outbox_item(dedupe_key="announce:x"))) == 1
    assert await store.add_outbox(outbox_item(dedupe_key="announce:x", text="again")) == []
    assert [r.item.text for r in await store.outbox()] == ["hi"]
    # Items without a key never collide.
    assert len(await store.add_outbox(outbox_item())) == 1
    assert len(await store.add_outbox(outbox_item())) == 1


async def test_the_chunks_of_one_item_are_written_together_with_consecutive_ids(store: DatabaseStore) -> None:
    parts = [outbox_item(text=f"part {n}", part=n, parts=3, dedupe_key="reply:r1") for n in range(3)]
    ids = await store.add_outbox(*parts)
    assert ids == [ids[0], ids[0] + 1, ids[0] + 2]
    # A second write of the same item is refused whole: not one chunk goes out twice.
    assert await store.add_outbox(*parts) == []
    assert [(r.item.text, r.id - r.item.part) for r in await store.outbox()] == [
        (f"part {n}", ids[0]) for n in range(3)
    ]


async def test_suppressed_items_are_counted_per_session(store: DatabaseStore) -> None:
    a = await store.ensure_active_session("main")
    b = await store.ensure_active_session("telegram:group:-1")
    for session, state in ((a, "suppressed"), (a, "suppressed"), (a, "sent"), (b, "suppressed")):
        await store.add_outbox(
            outbox_item(session_id=session.id, session_key=session.key, state=state, reason="rule 1")
        )
    assert await store.count_outbox(a, "suppressed") == 2
    assert await store.count_outbox(b, "suppressed") == 1
    assert [r.item.reason for r in await store.outbox(state="suppressed")] == ["rule 1"] * 3


async def test_items_suppressed_before_a_chat_had_a_session_count_for_the_next_session(
    store: DatabaseStore,
) -> None:
    key = "telegram:group:-1"
    await store.add_outbox(outbox_item(session_key=key, state="suppressed"))
    first = await store.ensure_active_session(key)
    assert await store.count_outbox(first, "suppressed") == 1
    second = await store.start_new_session(key)
    # /clear starts the count afresh; a keyless item after it counts for the new session.
    assert await store.count_outbox(second, "suppressed") == 0
    await store.add_outbox(outbox_item(session_key=key, state="suppressed"))
    assert await store.count_outbox(second, "suppressed") == 1


async def test_an_injected_message_keeps_the_session_that_wrote_it(store: DatabaseStore) -> None:
    session = await store.ensure_active_session("telegram:group:-1")
    await store.add_user_message(session.id, "from main", via_session="main")
    await store.add_user_message(session.id, "from a person", sender="telegram:5")
    rows = await store.history(session.id, 10)
    assert [(r.content, r.via_session) for r in rows] == [("from main", "main"), ("from a person", None)]


async def test_the_send_override_is_kept_by_a_new_session_of_the_same_key(store: DatabaseStore) -> None:
    old = await store.ensure_active_session("telegram:group:-1")
    await store.set_send_policy(old.id, "deny")
    new = await store.start_new_session("telegram:group:-1")
    assert new.send_policy == "deny"
    assert (await store.active_session("telegram:group:-1")) == new


async def test_a_write_cancelled_mid_transaction_leaves_the_connection_usable(store: DatabaseStore) -> None:
    session = await store.ensure_active_session("main")
    for ticks in range(30):
        task = asyncio.create_task(store.add_user_message(session.id, "x"))
        for _ in range(ticks):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        # Every cancellation point, BEGIN included: the next transaction must still start.
        assert await store.add_user_message(session.id, "after") is not None


# -- crash recovery, integrity, backup -------------------------------------------------------


async def test_runs_left_running_by_a_crash_are_aborted_once(store: DatabaseStore) -> None:
    session = await store.ensure_active_session("main")
    upto = await store.add_user_message(session.id, "question")
    await store.start_run("crashed", session.id, "telegram", "h", upto)
    await store.start_run("done", session.id, "telegram", "h", upto)
    await store.finish_run("done", "ok")
    aborted = await store.abort_interrupted_runs()
    assert [(r.id, r.input_upto) for r in aborted] == [("crashed", upto)]
    run = await store.get_run("crashed")
    assert run is not None and run.status == "aborted" and run.ended_at is not None
    assert await store.abort_interrupted_runs() == []


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


@pytest.mark.sqlite_only
async def test_a_damaged_database_is_refused_and_left_byte_for_byte(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    await store.open()
    session = await store.ensure_active_session("main")
    for i in range(400):
        await store.add_user_message(session.id, f"message {i} " + "x" * 200)
    await store.close()
    before = damage(db_path)
    damaged = SQLiteStore(db_path)
    with pytest.raises(StoreError) as info:
        await damaged.open()
    assert "is damaged and was left untouched" in str(info.value)
    assert "bridge backup" in (info.value.remedy or "")  # what to do, for the log and the CLI
    assert read_bytes(db_path) == before


@pytest.mark.sqlite_only
async def test_a_backup_is_a_consistent_copy_taken_while_the_store_is_open(
    store: DatabaseStore, tmp_path: Path
) -> None:
    session = await store.ensure_active_session("main")
    await store.add_user_message(session.id, "keep me")
    target = tmp_path / "backups" / "copy.db"
    await store.backup(target)
    await store.add_user_message(session.id, "after the backup")
    copy = SQLiteStore(target)
    await copy.open()
    try:
        restored = await copy.active_session("main")
        assert restored is not None
        assert [r.content for r in await copy.history(restored.id, 10)] == ["keep me"]
    finally:
        await copy.close()
    with pytest.raises(StoreError, match="already exists"):
        await store.backup(target)


async def test_a_process_on_sqlite_that_did_not_run_for_a_while_goes_on(store: SQLiteStore) -> None:
    """`bridge chat` suspended (Ctrl-Z) and resumed: one process per file, nobody could take over."""
    assert await store.claim_worker()
    lost = asyncio.Event()
    watching = asyncio.create_task(store.watch_claim(lost.set))
    try:
        await asyncio.sleep(CLAIM_CHECK_S * 2)
        stall(TAKEOVER_GRACE_S + CLAIM_CHECK_S)
        await asyncio.sleep(CLAIM_CHECK_S * 3)
        assert not lost.is_set()
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
