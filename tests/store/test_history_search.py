"""search_history's store side on both backends: ranked full-text search over messages and memories,
by session, by chat (every session of a key) or everywhere, with the model's query never read as syntax."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.store.base import SessionRow, ToolExchange
from bridge.store.postgres import PostgresStore
from bridge.store.postgres.migrations import PG_MIGRATIONS
from bridge.store.search import (
    MAX_TERMS,
    RANKED_MATCHES,
    TSVECTOR_RANKED_MATCHES,
    SearchHit,
    Term,
    search_terms,
)
from bridge.store.sqlite import SQLiteStore
from bridge.store.sqlite.migrations import MIGRATIONS
from bridge.store.tables import DatabaseStore
from tests.pg import PostgresServer

# The version before full-text search, where the backfill tests start.
BEFORE_SEARCH = 15


async def execute(store: DatabaseStore, sql: str, params: tuple[Any, ...] = ()) -> None:
    await store._write(lambda conn: conn.execute(sql, params))


async def found(store: DatabaseStore, query: str, **scope: Any) -> list[str]:
    return [hit.content for hit in await store.search_history(query, limit=scope.pop("limit", 20), **scope)]


# ------------------------------------------------------------------------------------------ the words


def test_the_words_of_a_query_are_letters_digits_and_marks_in_any_script() -> None:
    assert search_terms('he said "NEAR(x, y)" -foo OR bars* café_au 😀 हिन्दी привет 42') == [
        Term("he"),
        Term("said"),
        Term("NEAR"),
        Term("x"),
        Term("y"),
        Term("foo"),
        Term("OR"),
        Term("bars", prefix=True),
        Term("café"),
        Term("au"),
        Term("हिन्दी"),
        Term("привет"),
        Term("42"),
    ]


def test_a_short_star_is_no_prefix_and_a_long_word_is_cut_to_a_prefix() -> None:
    assert search_terms("abc* a*") == [Term("abc"), Term("a")]
    assert search_terms("abcd*") == [Term("abcd", prefix=True)]
    [long] = search_terms("x" * 500)
    assert long.prefix and len(long.word) == 64


def test_a_long_query_keeps_its_first_words_once_each() -> None:
    terms = search_terms(" ".join(f"w{i % 40}" for i in range(5000)))
    assert [t.word for t in terms] == [f"w{i}" for i in range(MAX_TERMS)]
    assert search_terms("tea TEA tea") == [Term("tea"), Term("TEA")]


@pytest.mark.parametrize("query", ["", "   ", '"" * - ( ) : ^', "😀🎉", "\ud800"])
async def test_a_query_without_words_finds_nothing(
    store: DatabaseStore, session: SessionRow, query: str
) -> None:
    await store.add_user_message(session.id, "anything at all")
    assert search_terms(query) == []
    assert await store.search_history(query, limit=10) == []


# ------------------------------------------------------------------------------------------- ranking


async def test_the_closer_match_ranks_first(store: DatabaseStore, session: SessionRow) -> None:
    # Inserted in an order that newest-first alone would not sort as ranked.
    await store.add_user_message(session.id, "marmalade butter toast")
    long = "we had toast and tea and eggs and a spoon of marmalade on the side this morning"
    await store.add_user_message(session.id, long)
    await store.add_assistant_message(session.id, "r1", "marmalade marmalade toast")
    await store.add_user_message(session.id, "no fruit spread here")
    # The word more often in a text as long, then a short text over a long one.
    assert await found(store, "marmalade", session_id=session.id) == [
        "marmalade marmalade toast",
        "marmalade butter toast",
        long,
    ]


async def test_equal_matches_come_newest_first(store: DatabaseStore, session: SessionRow) -> None:
    for _ in range(3):
        await store.add_user_message(session.id, "same words again")
    hits = await store.search_history("words", limit=10, session_id=session.id)
    assert [hit.id for hit in hits] == sorted((hit.id for hit in hits), reverse=True)
    assert len(hits) == 3


async def test_every_word_of_the_query_must_be_there(store: DatabaseStore, session: SessionRow) -> None:
    await store.add_user_message(session.id, "the dentist is on Tuesday")
    await store.add_user_message(session.id, "the plumber is on Monday")
    assert await found(store, "dentist tuesday") == ["the dentist is on Tuesday"]
    assert await found(store, "dentist monday") == []


async def test_case_is_folded_and_words_are_whole_unless_starred(
    store: DatabaseStore, session: SessionRow
) -> None:
    await store.add_user_message(session.id, "Banana bread needs ripe BANANAS")
    await store.add_user_message(session.id, "a bandana")
    assert await found(store, "banana") == ["Banana bread needs ripe BANANAS"]
    assert await found(store, "bananas") == ["Banana bread needs ripe BANANAS"]
    assert await found(store, "banan") == []
    assert await found(store, "banan*") == ["Banana bread needs ripe BANANAS"]


async def test_words_of_other_scripts_are_found(store: DatabaseStore, session: SessionRow) -> None:
    await store.add_user_message(session.id, "встреча в пятницу")
    await store.add_user_message(session.id, "会议 明天")
    await store.add_user_message(session.id, "un café noir")
    assert await found(store, "пятницу") == ["встреча в пятницу"]
    assert await found(store, "会议") == ["会议 明天"]
    assert await found(store, "café") == ["un café noir"]


async def test_punctuation_separates_words(store: DatabaseStore, session: SessionRow) -> None:
    await store.add_user_message(session.id, "use snake_case names, (really)!")
    assert await found(store, "case") == ["use snake_case names, (really)!"]
    assert await found(store, '"really"') == ["use snake_case names, (really)!"]


async def test_a_common_word_ranks_among_its_newest_matches(
    store: DatabaseStore, session: SessionRow, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bridge.store import search as search_module

    monkeypatch.setattr(search_module, "RANKED_MATCHES", 3)
    monkeypatch.setattr(search_module, "TSVECTOR_RANKED_MATCHES", 3)
    await store.add_user_message(session.id, "tea")  # the best match, but older than the newest three
    for i in range(5):
        await store.add_user_message(session.id, f"tea with milk and honey {i}")
    assert await found(store, "tea", limit=10) == [f"tea with milk and honey {i}" for i in (4, 3, 2)]
    assert min(RANKED_MATCHES, TSVECTOR_RANKED_MATCHES) >= 1_000


# --------------------------------------------------------------------------------------------- scopes


@pytest.fixture
async def chats(store: DatabaseStore) -> dict[str, SessionRow]:
    """main before and after a /clear, a group, and another person's DM, each saying 'parcel'."""
    before = await store.ensure_active_session("main")
    await store.add_user_message(before.id, "parcel before the clear")
    after = await store.start_new_session("main")
    await store.add_user_message(after.id, "parcel after the clear")
    group = await store.ensure_active_session("telegram:group:-100")
    await store.add_user_message(group.id, "parcel in the group")
    dm = await store.ensure_active_session("telegram:dm:7")
    await store.add_user_message(dm.id, "parcel in a DM")
    return {"before": before, "after": after, "group": group, "dm": dm}


async def test_session_scope_reads_that_session_only(
    store: DatabaseStore, chats: dict[str, SessionRow]
) -> None:
    after = chats["after"]
    assert await found(store, "parcel", session_id=after.id, key="main") == ["parcel after the clear"]
    assert await found(store, "parcel", session_id=chats["group"].id) == ["parcel in the group"]


async def test_chat_scope_reads_every_session_of_the_key_before_clear_too(
    store: DatabaseStore, chats: dict[str, SessionRow]
) -> None:
    hits = await store.search_history("parcel", limit=10, key="main")
    assert [hit.content for hit in hits] == ["parcel after the clear", "parcel before the clear"]
    assert {hit.session_id for hit in hits} == {chats["before"].id, chats["after"].id}
    assert await found(store, "parcel", key="telegram:group:-100") == ["parcel in the group"]


async def test_a_key_is_matched_whole_never_as_a_prefix_or_its_words(store: DatabaseStore) -> None:
    topic = await store.ensure_active_session("telegram:group:-100:topic:5")
    await store.add_user_message(topic.id, "parcel in a topic")
    group = await store.ensure_active_session("telegram:group:-100")
    await store.add_user_message(group.id, "parcel in the group")
    assert await found(store, "parcel", key="telegram:group:-100") == ["parcel in the group"]
    assert await found(store, "parcel", key="telegram:group") == []
    assert await found(store, "parcel", key="-100") == []


async def test_no_scope_reads_every_chat(store: DatabaseStore, chats: dict[str, SessionRow]) -> None:
    hits = await store.search_history("parcel", limit=10)
    assert sorted(hit.key for hit in hits) == ["main", "main", "telegram:dm:7", "telegram:group:-100"]


async def test_words_of_a_session_id_or_key_never_match_text(
    store: DatabaseStore, chats: dict[str, SessionRow]
) -> None:
    assert await found(store, chats["group"].id) == []
    assert await found(store, "telegram") == []
    assert await found(store, "s" + chats["group"].id.encode().hex()) == []


# ------------------------------------------------------------------------------- what is searched


async def test_only_what_users_and_the_assistant_said_is_searched(
    store: DatabaseStore, session: SessionRow
) -> None:
    await store.add_tool_exchange(
        session.id,
        "r1",
        ToolExchange(
            "c1", "webfetch", '{"url": "zebra"}', "zebra stripes page", "success", 0, preamble="zebra"
        ),
    )
    assert await found(store, "zebra") == []
    await store.add_assistant_message(session.id, "r1", "Zebras have stripes; a zebra is black and white")
    assert await found(store, "zebra") == ["Zebras have stripes; a zebra is black and white"]


async def test_hits_say_where_when_and_who(store: DatabaseStore, chats: dict[str, SessionRow]) -> None:
    group = chats["group"]
    await store.add_assistant_message(group.id, None, "the courier has the parcel")
    await store.add_user_message(group.id, "parcel news from main", via_session="main")
    hits = {hit.content: hit for hit in await store.search_history("parcel", limit=10, key=group.key)}
    said = hits["the courier has the parcel"]
    assert (said.kind, said.key, said.session_id, said.role) == ("message", group.key, group.id, "assistant")
    assert said.created_at > 0
    assert hits["parcel in the group"].role == "user"
    # Written by another session's agent: never presented as a person.
    assert hits["parcel news from main"].role == "agent"


async def test_an_edited_message_is_found_by_its_new_text_only(
    store: DatabaseStore, session: SessionRow
) -> None:
    message_id = await store.add_user_message(session.id, "[voice message]")
    assert message_id is not None
    await store.set_user_message(session.id, message_id, "transcript: call the plumber", None)
    assert await found(store, "plumber") == ["transcript: call the plumber"]
    assert await found(store, "voice") == []


async def test_a_very_long_message_is_stored_and_found_by_its_opening(
    store: DatabaseStore, session: SessionRow
) -> None:
    # ~1.3 MB of distinct words: more than a tsvector may hold, had the whole text been indexed.
    text = "opening " + " ".join(f"word{i:07d}" for i in range(110_000)) + " closing"
    await store.add_user_message(session.id, text)
    [hit] = await store.search_history("opening", limit=5)
    assert hit.content == text
    assert await store.search_history("closing", limit=5) == []


async def test_a_deleted_session_leaves_nothing_behind_in_the_index(
    store: DatabaseStore, chats: dict[str, SessionRow]
) -> None:
    await execute(store, "DELETE FROM sessions WHERE id = ?", (chats["group"].id,))
    await execute(store, "DELETE FROM messages WHERE session_id = ?", (chats["dm"].id,))
    store.forget_session("telegram:group:-100")
    assert sorted(await found(store, "parcel")) == ["parcel after the clear", "parcel before the clear"]
    group = await store.ensure_active_session("telegram:group:-100")
    await store.add_user_message(group.id, "parcel again")
    assert await found(store, "parcel", key=group.key) == ["parcel again"]


@pytest.mark.sqlite_only
async def test_the_sqlite_index_stays_consistent_through_edits_and_deletes(
    store: DatabaseStore, chats: dict[str, SessionRow]
) -> None:
    message_id = await store.add_user_message(chats["dm"].id, "first words")
    assert message_id is not None
    await store.set_user_message(chats["dm"].id, message_id, "second words", None)
    await store.add_memory("main", "a parcel memory")
    await execute(store, "DELETE FROM sessions WHERE id = ?", (chats["group"].id,))
    await execute(store, "DELETE FROM memories")
    for table in ("messages_search", "memories_search"):
        # FTS5 checks its own structure (rank 0: without the text, which lives elsewhere).
        await execute(store, f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 0)")
    counts = await store._rows("SELECT COUNT(*) FROM messages_search WHERE messages_search MATCH 'parcel'")
    assert counts == [(3,)]


# ------------------------------------------------------------------------------------------- memories


async def test_memories_of_the_chat_are_found_and_come_first(
    store: DatabaseStore, chats: dict[str, SessionRow]
) -> None:
    await store.add_memory("main", "the parcel locker code is 4411")
    await store.add_memory("telegram:group:-100", "the group's parcel goes to reception")
    await store.add_memory("main", "likes tea")
    hits = await store.search_history("parcel", limit=10, key="main")
    assert [(hit.kind, hit.content) for hit in hits][:2] == [
        ("memory", "the parcel locker code is 4411"),
        ("message", "parcel after the clear"),
    ]
    [memory] = [hit for hit in hits if hit.kind == "memory"]
    assert (memory.key, memory.session_id, memory.role) == ("main", None, None)
    # A session's search reads its key's memories; everywhere, every chat's.
    session_hits = await store.search_history("parcel", limit=10, session_id=chats["after"].id)
    assert [hit.content for hit in session_hits if hit.kind == "memory"] == ["the parcel locker code is 4411"]
    everywhere = await store.search_history("parcel", limit=10)
    assert {hit.key for hit in everywhere if hit.kind == "memory"} == {"main", "telegram:group:-100"}


async def test_memories_take_at_most_half_the_limit(
    store: DatabaseStore, chats: dict[str, SessionRow]
) -> None:
    for i in range(6):
        await store.add_memory("main", f"parcel fact {i}")
    hits = await store.search_history("parcel", limit=4, key="main")
    assert [hit.kind for hit in hits] == ["memory", "memory", "message", "message"]


# ------------------------------------------------------------------------------------- hostile text

HOSTILE = [
    '"',
    '""',
    'say "hello',
    "*",
    "tea*",
    "**",
    "NEAR(tea milk)",
    "NEAR(",
    "tea NEAR/2 milk",
    "-tea",
    "tea -milk",
    "tea OR milk",
    "OR",
    "AND NOT",
    "content: tea",
    "place: s00",
    "{content place}: tea",
    "^tea",
    "tea:*",
    "'tea' & !milk | (x <-> y)",
    "tea\\",
    "\x00tea",
    "\ud800tea\udfff",
    "tëa ☕ 茶 चाय",
    "tea " * 2_500,  # 10 KB
    "t" * 10_000,
]


@pytest.mark.parametrize("query", HOSTILE, ids=[repr(q[:20]) for q in HOSTILE])
async def test_hostile_query_text_never_raises(
    store: DatabaseStore, chats: dict[str, SessionRow], query: str
) -> None:
    await store.add_user_message(chats["after"].id, "tea with milk")
    await store.add_memory("main", "tea, no milk")
    for scope in ({}, {"key": "main"}, {"session_id": chats["after"].id, "key": "main"}):
        hits = await store.search_history(query, limit=10, **scope)
        assert all(isinstance(hit, SearchHit) for hit in hits)


async def test_operators_in_the_query_are_plain_words(store: DatabaseStore, session: SessionRow) -> None:
    await store.add_user_message(session.id, "tea with milk")
    await store.add_user_message(session.id, "near the OR theatre")
    assert await found(store, "tea -milk") == ["tea with milk"]  # not "tea without milk"
    assert await found(store, "NEAR(OR)") == ["near the OR theatre"]


# ------------------------------------------------------------------------------------------ migration


@pytest.mark.sqlite_only
async def test_the_migration_indexes_rows_written_before_it(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db_path) as raw:
        for script in MIGRATIONS[:BEFORE_SEARCH]:
            raw.executescript(script)
        raw.execute(f"PRAGMA user_version = {BEFORE_SEARCH}")
        insert_old_rows(raw.execute)
    raw.close()
    store = SQLiteStore(db_path)
    await store.open()
    try:
        await assert_old_rows_found(store)
    finally:
        await store.close()


async def test_the_postgresql_migration_indexes_rows_written_before_it(postgres: PostgresServer) -> None:
    url = postgres.database()
    with psycopg.connect(url, autocommit=True) as raw:
        for script in PG_MIGRATIONS[:BEFORE_SEARCH]:
            raw.execute(script.encode())
        raw.execute(b"CREATE TABLE bridge_schema (version INTEGER NOT NULL)")
        raw.execute(f"INSERT INTO bridge_schema (version) VALUES ({BEFORE_SEARCH})".encode())
        insert_old_rows(lambda sql, params=(): raw.execute(sql.replace("?", "%s").encode(), params))
    store = PostgresStore(url, pool_size=2)
    await store.open()
    try:
        await assert_old_rows_found(store)
    finally:
        await store.close()


def insert_old_rows(execute: Any) -> None:
    execute(
        "INSERT INTO sessions (id, key, created_at, updated_at, ended_at) VALUES ('old', 'main', 1, 2, 2)"
    )
    execute("INSERT INTO sessions (id, key, created_at, updated_at) VALUES ('new', 'main', 2, 3)")
    execute(
        "INSERT INTO sessions (id, key, created_at, updated_at) VALUES ('grp', 'telegram:group:-5', 2, 3)"
    )
    rows = [
        ("old", "user", "the spare key is under the pot", 1.0),
        ("old", "tool_result", "key key key", 1.5),
        ("new", "assistant", "the key is under the pot, you said", 2.0),
        ("grp", "user", "who has the key", 2.5),
    ]
    for row in rows:
        execute("INSERT INTO messages (session_id, kind, content, created_at) VALUES (?, ?, ?, ?)", row)
    execute(
        "INSERT INTO memories (scope, content, created_at) VALUES ('main', 'spare key: under the pot', 1)"
    )


async def assert_old_rows_found(store: DatabaseStore) -> None:
    hits = await store.search_history("key", limit=10, key="main")
    assert [(hit.kind, hit.content) for hit in hits] == [
        ("memory", "spare key: under the pot"),
        # The shorter text first: both hold the word once.
        ("message", "the spare key is under the pot"),
        ("message", "the key is under the pot, you said"),
    ]
    assert await found(store, "key", session_id="new") == [
        "spare key: under the pot",
        "the key is under the pot, you said",
    ]
    assert await found(store, "who") == ["who has the key"]
    # New rows are indexed by the triggers (SQLite) or the generated column (PostgreSQL) from now on.
    session = await store.ensure_active_session("main")
    await store.add_user_message(session.id, "a new key")
    assert "a new key" in await found(store, "key", key="main")
