"""search_history's scopes on a real store: this session, this chat's sessions (before /clear too), or
every chat, which only the owners' main may search, as the run's authority decides."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.sessions.authority import Authority
from bridge.store.sqlite import SQLiteStore
from bridge.tools.base import ToolResult
from bridge.tools.builtin.core import SEARCH_SNIPPET_CHARS, search_history
from tests.tools.conftest import MakeSessionContext

GROUP = "telegram:group:-100"
OTHER_GROUP = "telegram:group:-200"
MEMBER = "telegram:7"


def texts(result: ToolResult) -> list[str]:
    assert result.ok, result.content
    return [match["text"] for match in json.loads(result.content)["matches"]]


@pytest.fixture
async def said(store: SQLiteStore) -> None:
    """Each chat said 'lighthouse' somewhere; main and the group also before a /clear."""
    for key in ("main", GROUP):
        before = await store.ensure_active_session(key)
        await store.add_user_message(before.id, f"lighthouse in {key} before the clear")
        after = await store.start_new_session(key)
        await store.add_user_message(after.id, f"lighthouse in {key} now")
    for key in (OTHER_GROUP, "telegram:dm:9"):
        session = await store.ensure_active_session(key)
        await store.add_user_message(session.id, f"lighthouse in {key}")
    await store.add_memory("main", "the owner's lighthouse is in Brittany")
    await store.add_memory(OTHER_GROUP, "the other group's lighthouse memory")


async def test_the_default_scope_is_this_session(make_session_ctx: MakeSessionContext, said: None) -> None:
    ctx = await make_session_ctx(GROUP, person=MEMBER)
    result = await search_history({"query": "lighthouse"}, ctx)
    assert texts(result) == [f"lighthouse in {GROUP} now"]
    assert json.loads(result.content)["scope"] == "session"


async def test_chat_scope_in_a_group_reads_only_that_groups_sessions(
    make_session_ctx: MakeSessionContext, said: None
) -> None:
    ctx = await make_session_ctx(GROUP, person=MEMBER)
    result = await search_history({"query": "lighthouse", "scope": "chat"}, ctx)
    assert texts(result) == [f"lighthouse in {GROUP} now", f"lighthouse in {GROUP} before the clear"]
    matches = json.loads(result.content)["matches"]
    assert {m["session_key"] for m in matches} == {GROUP}


async def test_chat_scope_in_main_finds_its_memories_and_earlier_sessions(
    make_session_ctx: MakeSessionContext, said: None
) -> None:
    ctx = await make_session_ctx("main", person="telegram:1")
    matches = json.loads((await search_history({"query": "lighthouse", "scope": "chat"}, ctx)).content)[
        "matches"
    ]
    assert [(m["kind"], m["text"]) for m in matches] == [
        ("memory", "the owner's lighthouse is in Brittany"),
        ("message", "lighthouse in main now"),
        ("message", "lighthouse in main before the clear"),
    ]
    memory, message = matches[0], matches[1]
    assert "role" not in memory and memory["session_key"] == "main"
    assert message["role"] == "user" and message["at"].endswith("+00:00")


async def test_all_scope_in_main_reads_every_chat(make_session_ctx: MakeSessionContext, said: None) -> None:
    ctx = await make_session_ctx("main", person="telegram:1")
    result = await search_history({"query": "lighthouse", "scope": "all", "limit": 50}, ctx)
    found = texts(result)
    assert "lighthouse in telegram:dm:9" in found and f"lighthouse in {OTHER_GROUP}" in found
    assert "the other group's lighthouse memory" in found
    assert len(found) == 8  # six messages in four chats, two memories


async def test_an_owners_task_made_in_main_may_search_every_chat(
    make_session_ctx: MakeSessionContext, said: None
) -> None:
    made_in_main = Authority("owner", "main", "telegram:1").via("task:ab12")
    ctx = await make_session_ctx("cron:ab12", authority=made_in_main)
    assert "lighthouse in telegram:dm:9" in texts(
        await search_history({"query": "lighthouse", "scope": "all"}, ctx)
    )


@pytest.mark.parametrize(
    ("key", "person", "authority"),
    [
        (GROUP, MEMBER, None),
        # An owner outside main acts in that chat only.
        (GROUP, "telegram:1", None),
        ("telegram:dm:9", "telegram:9", None),
        ("hook:deploy", None, Authority("hook", GROUP, "hook:deploy")),
        ("cron:cd34", None, Authority("member", GROUP, MEMBER).via("task:cd34")),
    ],
)
async def test_all_scope_outside_main_is_refused_naming_the_scopes_allowed(
    make_session_ctx: MakeSessionContext,
    said: None,
    key: str,
    person: str | None,
    authority: Authority | None,
) -> None:
    ctx = await make_session_ctx(key, person=person, authority=authority)
    result = await search_history({"query": "lighthouse", "scope": "all"}, ctx)
    assert not result.ok
    assert result.code == "not_allowed"
    assert "'session'" in result.content and "'chat'" in result.content
    assert "lighthouse in" not in result.content


async def test_the_result_names_the_words_searched_for(make_session_ctx: MakeSessionContext) -> None:
    ctx = await make_session_ctx()
    result = await search_history({"query": '"light-house" keeper* NEAR(' + "x" * 100}, ctx)
    assert json.loads(result.content)["query"] == f"light house keeper* NEAR {'x' * 64}*"


async def test_a_query_of_no_words_is_an_error_result(make_session_ctx: MakeSessionContext) -> None:
    result = await search_history({"query": '"*" - ()'}, await make_session_ctx())
    assert result.code == "invalid_query"


async def test_an_unknown_scope_is_invalid_arguments_naming_it(make_session_ctx: MakeSessionContext) -> None:
    result = await search_history({"query": "x", "scope": "everything"}, await make_session_ctx())
    assert result.code == "invalid_arguments"
    assert "'scope'" in result.content


@pytest.mark.parametrize(
    "query", ['"', 'NEAR("a" b', "-x OR *", "col: x", "x" * 10_000, "tea " * 2_500, "☕ \ud800 茶"]
)
async def test_hostile_queries_get_a_result_never_an_exception(
    make_session_ctx: MakeSessionContext, said: None, query: str
) -> None:
    ctx = await make_session_ctx("main", person="telegram:1")
    for scope in ("session", "chat", "all"):
        result = await search_history({"query": query, "scope": scope}, ctx)
        assert result.ok or result.code == "invalid_query", result.content


async def test_a_long_text_is_cut_around_the_first_word_found(
    store: SQLiteStore, make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx()
    text = "filler " * 200 + "the LIGHTHOUSE keeper " + "more " * 200
    await store.add_user_message(ctx.session.id, text)
    [snippet] = texts(await search_history({"query": "lighthouse"}, ctx))
    assert "the LIGHTHOUSE keeper" in snippet
    assert snippet.startswith("…") and snippet.endswith("…")
    assert len(snippet) <= SEARCH_SNIPPET_CHARS + 2


def test_the_description_names_the_scopes_for_small_models() -> None:
    assert all(scope in search_history.description for scope in ("'session'", "'chat'", "'all'"))
    schema: dict[str, Any] = search_history.parameters["properties"]["scope"]
    assert schema["enum"] == ["session", "chat", "all"]
