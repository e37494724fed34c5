"""The always-sent core tools: get_current_time, search_history and save_memory on a real store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bridge.config import Settings
from bridge.store.sqlite import SQLiteStore
from bridge.tools.base import ToolContext, ToolResult
from bridge.tools.builtin.core import MEMORY_MAX_CHARS, get_current_time, save_memory, search_history
from tests.tools.conftest import MakeSessionContext


def payload(result: ToolResult) -> Any:
    assert result.ok, result.content
    return json.loads(result.content)


# ------------------------------------------------------------------------------------- current time


def assert_now(iso: str, offset: timedelta) -> None:
    moment = datetime.fromisoformat(iso)
    assert moment.utcoffset() == offset
    assert abs(moment - datetime.now(UTC)) < timedelta(minutes=1)


async def test_current_time_defaults_to_the_configured_zone(make_session_ctx: MakeSessionContext) -> None:
    ctx = await make_session_ctx(settings=Settings(agent={"timezone": "Asia/Tokyo"}))
    data = payload(await get_current_time({}, ctx))
    assert data["timezone"] == "Asia/Tokyo"
    assert_now(data["iso"], timedelta(hours=9))
    moment = datetime.fromisoformat(data["iso"])
    assert data["weekday"] == moment.strftime("%A") and data["time"] == moment.strftime("%H:%M")
    # Said as a person would, so a small model has a sentence to copy rather than a stamp to misread.
    assert (
        data["in_words"] == f"It's {moment:%H:%M} on {moment:%A}, {moment:%-d %B %Y}, in Tokyo (Asia/Tokyo)."
    )


async def test_current_time_in_an_explicit_zone(make_session_ctx: MakeSessionContext) -> None:
    ctx = await make_session_ctx(settings=Settings(agent={"timezone": "Asia/Tokyo"}))
    data = payload(await get_current_time({"timezone": "UTC"}, ctx))
    assert data["timezone"] == "UTC"
    assert_now(data["iso"], timedelta(0))


async def test_empty_zone_falls_back_to_the_configured_one(make_session_ctx: MakeSessionContext) -> None:
    ctx = await make_session_ctx(settings=Settings(agent={"timezone": "Asia/Kolkata"}))
    assert payload(await get_current_time({"timezone": ""}, ctx))["timezone"] == "Asia/Kolkata"


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "Europe", "../../etc/passwd", "/etc/localtime"])
async def test_invalid_zone_is_an_error_result(make_session_ctx: MakeSessionContext, zone: Any) -> None:
    result = await get_current_time({"timezone": zone}, await make_session_ctx())
    assert not result.ok
    assert result.code == "invalid_timezone"
    assert str(zone) in result.content


async def test_a_zone_that_is_no_string_is_invalid_arguments(make_session_ctx: MakeSessionContext) -> None:
    result = await get_current_time({"timezone": 42}, await make_session_ctx())
    assert result.code == "invalid_arguments"
    assert "'timezone' must be a string (got 42)" in result.content


# ----------------------------------------------------------------------------------- search history


async def test_search_history_finds_only_this_sessions_messages(
    store: SQLiteStore, make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx("main")
    other = await store.ensure_active_session("telegram:dm:5")
    await store.add_user_message(ctx.session.id, "my banana bread recipe")
    await store.add_assistant_message(ctx.session.id, None, "Banana bread needs ripe bananas")
    await store.add_user_message(ctx.session.id, "something else")
    await store.add_user_message(other.id, "their banana secret")

    data = payload(await search_history({"query": "  banana "}, ctx))
    assert data["query"] == "banana"
    assert data["scope"] == "session"
    # Ranked: the shorter text holding the word once comes first (newest first only among equals).
    assert [(m["role"], m["text"]) for m in data["matches"]] == [
        ("user", "my banana bread recipe"),
        ("assistant", "Banana bread needs ripe bananas"),
    ]
    assert all("secret" not in m["text"] for m in data["matches"])


async def test_search_history_limit_is_clamped(
    store: SQLiteStore, make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx()
    for i in range(60):
        await store.add_user_message(ctx.session.id, f"note {i}")
    assert len(payload(await search_history({"query": "note", "limit": 3}, ctx))["matches"]) == 3
    assert len(payload(await search_history({"query": "note", "limit": 1000}, ctx))["matches"]) == 50
    assert len(payload(await search_history({"query": "note", "limit": "many"}, ctx))["matches"]) == 10


@pytest.mark.parametrize("args", [{}, {"query": ""}, {"query": "  "}, {"query": 3}])
async def test_search_history_without_query_is_invalid_arguments_naming_query(
    make_session_ctx: MakeSessionContext, args: dict[str, Any]
) -> None:
    result = await search_history(args, await make_session_ctx())
    assert result.code == "invalid_arguments"
    assert "'query'" in result.content


# ------------------------------------------------------------------------------------------ memory


async def test_memory_is_saved_under_the_session_key_and_survives_a_new_session(
    store: SQLiteStore, make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx("telegram:group:-100")
    result = await save_memory({"content": "  The team stand-up is at 9:30  "}, ctx)
    assert result.ok

    await store.start_new_session("telegram:group:-100")
    assert await store.memories("telegram:group:-100", 10) == ["The team stand-up is at 9:30"]
    assert await store.memories("main", 10) == []
    assert await store.memories(ctx.session.id, 10) == []  # keyed by conversation, not by session


async def test_memory_of_one_key_is_not_visible_to_another(
    store: SQLiteStore, make_session_ctx: MakeSessionContext
) -> None:
    mine = await make_session_ctx("telegram:dm:1")
    theirs = await make_session_ctx("telegram:dm:2")
    await save_memory({"content": "likes tea"}, mine)
    await save_memory({"content": "likes coffee"}, theirs)
    assert await store.memories("telegram:dm:1", 10) == ["likes tea"]
    assert await store.memories("telegram:dm:2", 10) == ["likes coffee"]


async def test_a_fact_already_in_memory_is_not_kept_twice_whatever_its_case_or_punctuation(
    store: SQLiteStore, make_session_ctx: MakeSessionContext
) -> None:
    # The 0.5B model saved "my locker number is 4711" seven times in one turn, in slightly other words.
    ctx = await make_session_ctx("telegram:dm:1")
    assert (await save_memory({"content": "my locker number is 4711"}, ctx)).ok
    again = await save_memory({"content": "My locker number is 4711."}, ctx)
    assert not again.ok and again.code == "already_saved"
    assert "already in memory: my locker number is 4711" in again.content
    # Its own result passed back as the next fact, as the 0.5B model does.
    echoed = await save_memory({"content": "Saved to memory: my locker number is 4711."}, ctx)
    assert echoed.code == "already_saved"
    assert (await save_memory({"content": "my locker number is 4712"}, ctx)).ok
    assert await store.memories("telegram:dm:1", 10) == [
        "my locker number is 4711",
        "my locker number is 4712",
    ]
    # Another chat's memory is no reason to refuse.
    other = await make_session_ctx("telegram:dm:2")
    assert (await save_memory({"content": "My locker number is 4711."}, other)).ok


async def test_too_long_memory_is_refused_and_not_stored(
    store: SQLiteStore, make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx()
    result = await save_memory({"content": "x" * (MEMORY_MAX_CHARS + 1)}, ctx)
    assert not result.ok
    assert result.code == "too_long"
    assert await store.memories("main", 10) == []
    assert (await save_memory({"content": "y" * MEMORY_MAX_CHARS}, ctx)).ok


@pytest.mark.parametrize("args", [{}, {"content": ""}, {"content": "   "}, {"content": ["a"]}])
async def test_memory_without_content_is_invalid_arguments_naming_content(
    store: SQLiteStore, make_session_ctx: MakeSessionContext, args: dict[str, Any]
) -> None:
    ctx: ToolContext = await make_session_ctx()
    result = await save_memory(args, ctx)
    assert result.code == "invalid_arguments"
    assert "'content'" in result.content
    assert await store.memories("main", 10) == []
