"""The sessions group: listing sessions and reading their history, without leaking chats to non-owners."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.events import Attachment, dumps
from bridge.sessions.authority import Authority
from bridge.store.base import SessionMeta, SessionRow, ToolExchange
from bridge.store.sqlite import SQLiteStore
from bridge.tools.base import AGENT_CHANNEL, ToolContext, ToolResult
from bridge.tools.builtin.sessions import (
    LIST_MAX,
    LIST_MESSAGES_MAX,
    SEND_TIMEOUT_DEFAULT,
    SEND_TIMEOUT_MAX,
    sessions_history,
    sessions_list,
    sessions_send,
)
from tests.tools.conftest import MakeSessionContext


def payload(result: ToolResult) -> Any:
    assert result.ok, result.content
    return json.loads(result.content)


async def listed(ctx: ToolContext, **args: Any) -> list[dict[str, Any]]:
    data = payload(await sessions_list(args, ctx))
    assert data["count"] == len(data["sessions"])
    return data["sessions"]


async def chat(store: SQLiteStore, session: SessionRow, *texts: str) -> None:
    for i, text in enumerate(texts):
        if i % 2:
            await store.add_assistant_message(session.id, None, text)
        else:
            await store.add_user_message(session.id, text)


async def tool_exchange(store: SQLiteStore, session: SessionRow, call_id: str) -> None:
    run_id = f"run-{call_id}"
    await store.start_run(run_id, session.id, None, "h")
    await store.add_tool_exchange(
        session.id,
        run_id,
        ToolExchange(call_id, "webfetch", '{"url":"https://x"}', "page text", "success", 0),
    )


@pytest.fixture
async def sessions(store: SQLiteStore) -> dict[str, SessionRow]:
    """One session of each kind, plus sessions under the reserved keys that must never show."""
    rows = {
        "main": await store.ensure_active_session("main", SessionMeta(surface="telegram", display_name="Me")),
        "telegram:group:-100": await store.ensure_active_session(
            "telegram:group:-100", SessionMeta(surface="telegram", display_name="Team")
        ),
        "cron:daily": await store.ensure_active_session("cron:daily"),
        "discord:dm:7": await store.ensure_active_session("discord:dm:7", SessionMeta(surface="discord")),
        "not a key": await store.ensure_active_session("not a key"),
        "global": await store.ensure_active_session("global"),
        "unknown": await store.ensure_active_session("unknown"),
    }
    await chat(store, rows["main"], "hello", "hi there")
    await chat(store, rows["telegram:group:-100"], "team news")
    await chat(store, rows["global"], "global secret")
    return rows


# ------------------------------------------------------------------------------------------ listing


async def test_rows_carry_key_kind_provider_id_and_message_count(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    rows = {row["key"]: row for row in await listed(await make_session_ctx())}
    assert set(rows) == {"main", "telegram:group:-100", "cron:daily", "discord:dm:7", "not a key"}
    assert {k: (r["kind"], r["provider"], r["message_count"]) for k, r in rows.items()} == {
        "main": ("main", "telegram", 2),
        "telegram:group:-100": ("group", "telegram", 1),
        "cron:daily": ("cron", "internal", 0),
        "discord:dm:7": ("other", "discord", 0),
        "not a key": ("other", "unknown", 0),
    }
    for key, row in rows.items():
        assert row["session_id"] == sessions[key].id
        assert isinstance(row["updated_at"], int)
        assert "messages" not in row
    assert rows["telegram:group:-100"]["display_name"] == "Team"


async def test_reserved_keys_are_never_listed(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    for args in ({}, {"kinds": ["other"]}, {"limit": LIST_MAX}):
        keys = {row["key"] for row in await listed(await make_session_ctx(), **args)}
        assert not keys & {"global", "unknown"}


async def test_kinds_filter(sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext) -> None:
    ctx = await make_session_ctx()
    assert [row["key"] for row in await listed(ctx, kinds=["cron"])] == ["cron:daily"]
    assert {row["key"] for row in await listed(ctx, kinds=["main", "group"])} == {
        "main",
        "telegram:group:-100",
    }
    assert await listed(ctx, kinds=["hook"]) == []


@pytest.mark.parametrize("kinds", ["cron", ["martian"], [1]])
async def test_bad_kinds_are_invalid_arguments(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext, kinds: Any
) -> None:
    result = await sessions_list({"kinds": kinds}, await make_session_ctx())
    assert result.code == "invalid_arguments"
    assert "'kinds" in result.content and "main, group, cron, hook, node, agent, other" in result.content


async def test_limit_is_clamped(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx()
    assert len(await listed(ctx, limit=2)) == 2
    assert len(await listed(ctx, limit=0)) == 1
    assert len(await listed(ctx, limit=-5)) == 1
    assert len(await listed(ctx, limit="lots")) == 5


async def test_limit_never_exceeds_the_maximum(
    store: SQLiteStore, make_session_ctx: MakeSessionContext
) -> None:
    for i in range(LIST_MAX + 5):
        await store.ensure_active_session(f"cron:job{i}")
    assert (
        len(await listed(await make_session_ctx("cron:job0", authority=OWNERS_TASK), limit=10_000))
        == LIST_MAX
    )


async def test_message_limit_is_at_most_20_and_excludes_tool_rows(
    store: SQLiteStore, sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    main = sessions["main"]
    for i in range(30):
        await chat(store, main, f"question {i}", f"answer {i}")
        if i % 3 == 0:
            await tool_exchange(store, main, f"c{i}")
    ctx = await make_session_ctx()

    [row] = [r for r in await listed(ctx, message_limit=100) if r["key"] == "main"]
    messages = row["messages"]
    assert len(messages) == LIST_MESSAGES_MAX == 20
    assert {m["role"] for m in messages} == {"user", "assistant"}
    assert messages[-1]["content"] == "answer 29"
    assert messages[0]["content"] == "question 20"

    [row] = [r for r in await listed(ctx, message_limit=3) if r["key"] == "main"]
    assert [m["content"] for m in row["messages"]] == ["answer 28", "question 29", "answer 29"]

    [row] = [r for r in await listed(ctx, message_limit=0) if r["key"] == "main"]
    assert "messages" not in row


async def test_active_minutes_filters_quiet_sessions(
    store: SQLiteStore, sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    await store._write(lambda conn: conn.execute("UPDATE sessions SET updated_at = 0 WHERE key != 'main'"))
    ctx = await make_session_ctx()
    assert [row["key"] for row in await listed(ctx, active_minutes=10)] == ["main"]
    assert len(await listed(ctx)) == 5


async def test_a_session_other_than_main_sees_only_itself(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx("discord:dm:7")
    rows = await listed(ctx, limit=LIST_MAX, message_limit=5)
    assert [row["key"] for row in rows] == ["discord:dm:7"]
    assert await listed(ctx, kinds=["main"]) == []


async def test_a_session_finds_itself_even_behind_hundreds_of_newer_ones(
    store: SQLiteStore, make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx("telegram:dm:old")
    for n in range(LIST_MAX + 5):
        await store.add_user_message((await store.ensure_active_session(f"telegram:dm:{n}")).id, "hi")
    assert [row["key"] for row in await listed(ctx)] == ["telegram:dm:old"]


async def test_message_limit_counts_chat_messages_even_after_many_tool_rows(
    store: SQLiteStore, make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx("main")
    await chat(store, ctx.session, "first", "second")
    for n in range(12):
        await tool_exchange(store, ctx.session, f"c{n}")
    rows = await listed(ctx, message_limit=2)
    assert [m["content"] for m in rows[0]["messages"]] == ["first", "second"]


# ------------------------------------------------------------------------------------------ history


@pytest.fixture
async def with_tools(store: SQLiteStore, sessions: dict[str, SessionRow]) -> SessionRow:
    """The main session: hello, hi there, a webfetch call and result, then 'done'."""
    main = sessions["main"]
    await tool_exchange(store, main, "call-1")
    await store.add_assistant_message(main.id, None, "done")
    return main


async def test_history_by_key_hides_tool_rows_by_default(
    with_tools: SessionRow, make_session_ctx: MakeSessionContext
) -> None:
    data = payload(
        await sessions_history(
            {"session_key": "main"}, await make_session_ctx("cron:daily", authority=OWNERS_TASK)
        )
    )
    assert data["session_key"] == "main"
    assert data["session_id"] == with_tools.id
    assert [(m["role"], m["content"]) for m in data["messages"]] == [
        ("user", "hello"),
        ("assistant", "hi there"),
        ("assistant", "done"),
    ]


async def test_history_with_include_tools_shows_calls_and_results(
    with_tools: SessionRow, make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx()
    data = payload(await sessions_history({"session_key": "main", "include_tools": True}, ctx))
    roles = [m["role"] for m in data["messages"]]
    assert roles == ["user", "assistant", "tool_call", "tool", "assistant"]
    call, result = data["messages"][2:4]
    assert (call["tool_name"], call["tool_call_id"], call["input"]) == (
        "webfetch",
        "call-1",
        '{"url":"https://x"}',
    )
    assert (result["content"], result["status"]) == ("page text", "success")
    assert "input" not in result


@pytest.mark.parametrize(("flag", "shown"), [("false", False), ("no", False), ("true", True), ("yes", True)])
async def test_include_tools_reads_a_yes_or_no_not_truthiness(
    with_tools: SessionRow, make_session_ctx: MakeSessionContext, flag: str, shown: bool
) -> None:
    # A non-empty string is truthy; "false" must still mean false.
    ctx = await make_session_ctx()
    data = payload(await sessions_history({"session_key": "main", "include_tools": flag}, ctx))
    assert ("tool" in {m["role"] for m in data["messages"]}) is shown


async def test_history_by_session_id_reaches_ended_sessions(
    store: SQLiteStore, with_tools: SessionRow, make_session_ctx: MakeSessionContext
) -> None:
    await store.start_new_session("main")
    ctx = await make_session_ctx()
    by_key = payload(await sessions_history({"session_key": "main"}, ctx))
    assert by_key["messages"] == []
    by_id = payload(await sessions_history({"session_key": f"  {with_tools.id} "}, ctx))
    assert by_id["session_id"] == with_tools.id
    assert [m["content"] for m in by_id["messages"]] == ["hello", "hi there", "done"]


async def test_history_limit_keeps_the_latest_messages(
    with_tools: SessionRow, make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx()
    data = payload(await sessions_history({"session_key": "main", "limit": 2}, ctx))
    assert [m["content"] for m in data["messages"]] == ["hi there", "done"]


async def test_a_session_other_than_main_asking_for_another_key_gets_not_found(
    with_tools: SessionRow, make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx("discord:dm:7")
    for ref in ("main", with_tools.id):
        result = await sessions_history({"session_key": ref}, ctx)
        assert result.code == "not_found", ref
        assert "hello" not in result.content
    own = payload(await sessions_history({"session_key": "discord:dm:7"}, ctx))
    assert own["session_key"] == "discord:dm:7"


async def test_reserved_keys_and_unknown_refs_are_not_found(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    ctx = await make_session_ctx()
    for ref in ("global", "unknown", sessions["global"].id, "telegram:dm:404", "deadbeef"):
        result = await sessions_history({"session_key": ref}, ctx)
        assert result.code == "not_found", ref
        assert "global secret" not in result.content


@pytest.mark.parametrize("args", [{}, {"session_key": ""}, {"session_key": "  "}, {"session_key": 5}])
async def test_history_without_a_key_is_invalid_arguments(
    make_session_ctx: MakeSessionContext, args: dict[str, Any]
) -> None:
    result = await sessions_history(args, await make_session_ctx())
    assert result.code == "invalid_arguments"
    assert "'session_key'" in result.content


async def test_an_owner_speaking_in_a_group_cannot_pull_main_into_that_group(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    # Visibility follows the session, not the sender: the group's replies go to the whole group.
    ctx = await make_session_ctx("telegram:group:-100")
    assert [row["key"] for row in await listed(ctx)] == ["telegram:group:-100"]
    result = await sessions_history({"session_key": "main"}, ctx)
    assert not result.ok and result.code == "not_found"


# -- sessions_send ---------------------------------------------------------------------------


# A task an owner made in main: its firings act with the owner's authority there.
OWNERS_TASK = Authority("owner", "main", "telegram:1", chain=("task:daily",))


class RecordingMessenger:
    """Stands in for the agent-to-agent service: records what it was asked to carry."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, float]] = []

    async def send(
        self, requester: SessionRow, target: SessionRow, message: str, timeout_s: float, authority: Authority
    ) -> Any:
        self.calls.append((requester.key, target.key, message, timeout_s))
        if message == "fail":
            return {"run_id": "r9", "status": "error", "error": "the model failed"}
        return {"run_id": "r1", "status": "ok", "reply": "pong"}


async def send_ctx(make: MakeSessionContext, key: str = "main", channel: str | None = None) -> ToolContext:
    ctx = await make(key)
    ctx.messenger = RecordingMessenger()
    ctx.channel = channel
    return ctx


async def test_sessions_send_carries_the_message_and_returns_the_reply(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    ctx = await send_ctx(make_session_ctx)
    result = await sessions_send({"session_key": "telegram:group:-100", "message": " ping "}, ctx)
    assert payload(result) == {"run_id": "r1", "status": "ok", "reply": "pong"}
    assert ctx.messenger.calls == [("main", "telegram:group:-100", "ping", SEND_TIMEOUT_DEFAULT)]  # type: ignore[union-attr]


async def test_sessions_send_accepts_a_session_id_and_clamps_the_timeout(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    ctx = await send_ctx(make_session_ctx)
    group = sessions["telegram:group:-100"]
    await sessions_send({"session_key": group.id, "message": "hi", "timeout_seconds": 10_000}, ctx)
    await sessions_send({"session_key": group.id, "message": "hi", "timeout_seconds": 0}, ctx)
    calls = ctx.messenger.calls  # type: ignore[union-attr]
    assert [(c[1], c[3]) for c in calls] == [(group.key, SEND_TIMEOUT_MAX), (group.key, 0.0)]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"message": "hi"}, "invalid_arguments"),
        ({"session_key": "telegram:group:-100"}, "invalid_arguments"),
        ({"session_key": "telegram:group:-100", "message": "   "}, "invalid_arguments"),
        ({"session_key": "telegram:group:-100", "message": "hi", "timeout_seconds": -1}, "invalid_arguments"),
        (
            {"session_key": "telegram:group:-100", "message": "hi", "timeout_seconds": "soon"},
            "invalid_arguments",
        ),
        (
            {"session_key": "telegram:group:-100", "message": "hi", "timeout_seconds": True},
            "invalid_arguments",
        ),
        ({"session_key": "telegram:group:-999", "message": "hi"}, "not_found"),
        ({"session_key": "global", "message": "hi"}, "not_found"),
        ({"session_key": "main", "message": "hi"}, "same_session"),
    ],
)
async def test_sessions_send_rejects_bad_arguments(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext, args: dict[str, Any], code: str
) -> None:
    ctx = await send_ctx(make_session_ctx)
    result = await sessions_send(args, ctx)
    assert not result.ok and result.code == code
    assert ctx.messenger.calls == []  # type: ignore[union-attr]


async def test_a_group_session_cannot_send_anywhere_else(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    ctx = await send_ctx(make_session_ctx, "telegram:group:-100")
    for target in ("main", "cron:daily", sessions["main"].id):
        result = await sessions_send({"session_key": target, "message": "leak?"}, ctx)
        assert result.code == "not_found"
    assert ctx.messenger.calls == []  # type: ignore[union-attr]


async def test_an_agent_answering_an_agent_cannot_start_another_exchange(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    ctx = await send_ctx(make_session_ctx, channel=AGENT_CHANNEL)
    result = await sessions_send({"session_key": "telegram:group:-100", "message": "hi"}, ctx)
    assert result.code == "not_allowed"


async def test_a_failed_target_run_is_an_error_in_the_documented_shape(
    sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    ctx = await send_ctx(make_session_ctx)
    result = await sessions_send({"session_key": "telegram:group:-100", "message": "fail"}, ctx)
    assert not result.ok
    assert json.loads(result.content) == {"run_id": "r9", "status": "error", "error": "the model failed"}


async def test_history_names_attachments_and_marks_a_transcript(
    store: SQLiteStore, sessions: dict[str, SessionRow], make_session_ctx: MakeSessionContext
) -> None:
    main = sessions["main"]
    photo = Attachment("image", "photo-7.jpg", "file-7", "image/jpeg", 900, sha256="b" * 64)
    voice = Attachment("audio", "voice-8.ogg", "file-8", "audio/ogg", 300, voice=True, transcribed=True)
    await store.add_user_message(main.id, "what is this?", media=dumps([photo]))
    await store.add_user_message(main.id, "call mum at six", media=dumps([voice]))
    data = payload(
        await sessions_history(
            {"session_key": "main"}, await make_session_ctx("cron:daily", authority=OWNERS_TASK)
        )
    )
    assert [m["content"] for m in data["messages"]][-2:] == [
        "[image: photo-7.jpg]\nwhat is this?",
        "[voice message, transcribed]\ncall mum at six",
    ]
