"""Context compaction: long chats are summarised after the reply, never split a call, never block."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from bridge.agent.compaction import SUMMARY_SYSTEM, choose
from bridge.agent.history import Turn, split_turns
from bridge.agent.trace import format_trace
from bridge.config.agent import AgentSettings
from bridge.llm.base import ChatMessage
from bridge.store.base import ToolExchange
from bridge.store.sqlite import SQLiteStore
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from tests.harness import Harness, running_bridge
from tests.stores import summarise

SUMMARY_HEAD = SUMMARY_SYSTEM.split("{", 1)[0]
PADDING = "x" * 250


def is_summary_request(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith(SUMMARY_HEAD)


def summarise_facts(body: dict[str, Any]) -> Reply:
    """A summary that keeps every fact-N the transcript (and the earlier summary) mentions."""
    facts = sorted(set(re.findall(r"fact-\d+", body["messages"][-1]["content"])), key=lambda f: int(f[5:]))
    return fake.text("Summary: " + ", ".join(facts))


def chatty(body: dict[str, Any]) -> Reply:
    if is_summary_request(body):
        return summarise_facts(body)
    last = body["messages"][-1]
    return fake.text(f"noted {str(last['content'])[:7]} " + "y" * 200)


def turn_requests(llm: FakeOpenAI) -> list[dict[str, Any]]:
    return [body for body in llm.requests if not is_summary_request(body)]


def user_texts(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "user"]


async def session_of(h: Harness) -> Any:
    session = await h.bridge.store.active_session("main")
    assert session is not None
    return session


async def test_a_long_session_is_summarised_and_later_turns_replay_the_summary_not_those_turns(
    tmp_path: Path,
) -> None:
    async with (
        FakeOpenAI(chatty) as llm,
        running_bridge(tmp_path, llm, agent={"history_max_chars": 2_000}) as h,
    ):
        for n in range(12):
            await h.say(f"fact-{n} {PADDING}")
            await h.bridge.compactor.idle()
        session = await session_of(h)
        summaries = await h.bridge.store.summaries(session.id)
        await h.say("what do you know?")
    assert summaries, "a session past its budget was never compacted"
    latest = summaries[-1]
    # Rolled up: the newest summary still holds the facts of the first turns.
    assert "fact-0" in latest.content and "fact-1" in latest.content
    last = turn_requests(llm)[-1]
    system = str(last["messages"][0]["content"])
    assert "Earlier in this conversation" in system and latest.content in system
    # The covered turns are not replayed; every turn after the summary is, in order.
    said = user_texts(last)
    assert not any(t.startswith("fact-0 ") for t in said)
    assert said[-1] == "what do you know?"
    numbers = [int(t.split()[0][5:]) for t in said[:-1]]
    assert numbers == list(range(numbers[0], 12)) and numbers[0] > 0
    # Every reply went out, each exactly once; no summary was ever shown to the user.
    replies = h.sender.of("reply")
    assert len(replies) == 13 and not any(r.startswith("Summary:") for r in replies)


async def test_compaction_runs_after_the_reply_is_sent_and_never_holds_up_the_chat(tmp_path: Path) -> None:
    release = asyncio.Event()

    async def slow_summary(body: dict[str, Any]) -> Reply:
        await release.wait()
        return summarise_facts(body)

    def script(body: dict[str, Any]) -> Reply | Any:
        return slow_summary(body) if is_summary_request(body) else chatty(body)

    async with (
        FakeOpenAI(script) as llm,
        running_bridge(tmp_path, llm, agent={"history_max_chars": 1_000}) as h,
    ):
        for n in range(4):
            await h.say(f"fact-{n} {PADDING}")
        await llm.wait_for_requests(5)
        assert any(is_summary_request(b) for b in llm.requests)
        # The summary request is hanging; the reply of the turn that started it is already out,
        # and the next message is answered at once.
        replies_before = len(h.sender.of("reply"))
        assert replies_before == 4
        await asyncio.wait_for(h.say("fact-9 still there?"), 5)
        assert len(h.sender.of("reply")) == 5
        release.set()
        await asyncio.wait_for(h.bridge.compactor.idle(), 5)
        session = await session_of(h)
        assert await h.bridge.store.summaries(session.id)


def tool_heavy(body: dict[str, Any]) -> Reply:
    """Every turn calls a tool first; the first turn loads the sessions group."""
    if is_summary_request(body):
        return summarise_facts(body)
    last = body["messages"][-1]
    if last["role"] == "user":
        if "load" in str(last["content"]):
            return fake.tool_call("load_tool_group", {"group_name": "sessions"})
        return fake.tool_call("get_current_time", {"timezone": "UTC"}, content="Checking. " + "z" * 150)
    return fake.text("done " + "w" * 150)


def assert_calls_and_results_pair(body: dict[str, Any]) -> None:
    messages = body["messages"]
    for i, message in enumerate(messages):
        if message.get("tool_calls"):
            ids = [c["id"] for c in message["tool_calls"]]
            following = [m.get("tool_call_id") for m in messages[i + 1 : i + 1 + len(ids)]]
            assert following == ids, (ids, following)
        if message["role"] == "tool":
            previous = messages[i - 1]
            assert previous["role"] == "tool" or previous.get("tool_calls"), "a result without its call"


async def test_a_tool_heavy_session_is_compacted_without_splitting_calls_or_dropping_loaded_groups(
    tmp_path: Path,
) -> None:
    async with (
        FakeOpenAI(tool_heavy) as llm,
        running_bridge(tmp_path, llm, agent={"history_max_chars": 2_000, "history_limit": 30}) as h,
    ):
        await h.say("fact-0 load the sessions tools")
        for n in range(1, 10):
            await h.say(f"fact-{n} what time is it? {PADDING[:100]}")
            await h.bridge.compactor.idle()
        session = await session_of(h)
        summaries = await h.bridge.store.summaries(session.id)
        await h.say("fact-99 and now?")
    assert summaries and summaries[-1].upto > 0
    for body in turn_requests(llm):
        assert_calls_and_results_pair(body)
    last = turn_requests(llm)[-1]
    # The turn that loaded the group is long summarised, and the group is still loaded.
    assert not any("load the sessions" in t for t in user_texts(last))
    index = max(i for i, body in enumerate(llm.requests) if not is_summary_request(body))
    assert "sessions_list" in llm.tool_names(index)


async def test_a_failed_summary_request_falls_back_to_leaving_the_oldest_turns_out(tmp_path: Path) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            return fake.http_error(400, "context too long")
        return chatty(body)

    async with (
        FakeOpenAI(script) as llm,
        running_bridge(tmp_path, llm, agent={"history_max_chars": 1_000}) as h,
    ):
        for n in range(6):
            await h.say(f"fact-{n} {PADDING}")
            await h.bridge.compactor.idle()
        session = await session_of(h)
        runs = await h.bridge.store.list_runs(session_key="main", limit=100)
        assert await h.bridge.store.summaries(session.id) == []
    failed = [run for run, _ in runs if run.kind == "compaction"]
    # Tried once, not again on every later turn: a model that cannot take the request would fail each time.
    assert len(failed) == 1 and failed[0].status == "error"
    assert len([b for b in llm.requests if is_summary_request(b)]) == 1
    assert len(h.sender.of("reply")) == 6 and all(r.startswith("noted") for r in h.sender.of("reply"))
    last = turn_requests(llm)[-1]
    assert "fact-0" not in json.dumps(last["messages"]) and user_texts(last)[-1].startswith("fact-5")


async def test_slash_compact_summarises_now_and_status_sessions_history_and_trace_show_it(
    tmp_path: Path,
) -> None:
    async with FakeOpenAI(chatty) as llm, running_bridge(tmp_path, llm) as h:
        await h.say("/compact")
        nothing = h.sender.of("notice")[-1]
        for n in range(3):
            await h.say(f"fact-{n} short")
        await h.say("/compact")
        done = h.sender.of("notice")[-1]
        await h.say("/status")
        status = h.sender.of("notice")[-1]
        runs = await h.bridge.store.list_runs(session_key="main", limit=100)
        compaction = next(run for run, _ in runs if run.kind == "compaction")
        trace = await h.bridge.store.get_trace(compaction.id)
        llm.script = None
        llm.push(fake.tool_call("load_tool_group", {"group_name": "sessions"}))
        llm.push(fake.tool_call("sessions_history", {"session_key": "main"}), fake.text("ok"))
        await h.say("show the history")
        result = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert nothing.startswith("Nothing to compact")
    assert done.startswith("Compacted 2 older turns")
    assert "Summaries of older turns: 1 (replacing" in status and "of 2 turns)" in status
    assert trace is not None and "fact-1" in format_trace(trace)
    history = json.loads(result)
    assert history["summaries"][0]["content"] == "Summary: fact-0, fact-1"


async def test_a_cleared_session_starts_without_summaries(tmp_path: Path) -> None:
    async with FakeOpenAI(chatty) as llm, running_bridge(tmp_path, llm) as h:
        for n in range(3):
            await h.say(f"fact-{n} short")
        await h.say("/compact")
        await h.say("/clear")
        await h.say("hello again")
        await h.say("/status")
    assert "Earlier in this conversation" not in str(turn_requests(llm)[-1]["messages"][0]["content"])
    assert "Summaries of older turns: 0" in h.sender.of("notice")[-1]


async def test_a_compaction_stopped_at_shutdown_writes_nothing(tmp_path: Path) -> None:
    async def never(body: dict[str, Any]) -> Reply:
        await asyncio.Event().wait()
        raise AssertionError

    def script(body: dict[str, Any]) -> Any:
        return never(body) if is_summary_request(body) else chatty(body)

    async with FakeOpenAI(script) as llm, running_bridge(tmp_path, llm) as h:
        for n in range(3):
            await h.say(f"fact-{n} short")
        await h.bridge.handle(h.inbound("/compact"))
        await llm.wait_for_requests(4)
        await h.bridge.shutdown()
        session = await session_of(h)
        assert await h.bridge.store.summaries(session.id) == []
        runs = await h.bridge.store.list_runs(session_key="main", limit=100)
    assert [run.kind for run, _ in runs] == ["turn"] * 3


async def test_the_replay_after_a_summary_keeps_a_late_message_and_the_answer_to_it(tmp_path: Path) -> None:
    # Collect mode: message 2 arrives while the run answering 1 is busy, so that run's rows are
    # written after message 2. A summary of turn 1 must take them along, and leave message 2.
    store = SQLiteStore(tmp_path / "b.db")
    await store.open()
    try:
        session = await store.ensure_active_session("main")
        first = await store.add_user_message(session.id, "first")
        second = await store.add_user_message(session.id, "second")
        assert first is not None and second is not None
        await store.start_run("r1", session.id, None, "h", first)
        await store.add_tool_exchange(
            session.id, "r1", ToolExchange("c1", "get_current_time", "{}", "noon", "success", 1)
        )
        await store.finish_run("r1", "ok", reply=(session.id, "answer to first"))
        await store.start_run("r2", session.id, None, "h", second)
        await store.finish_run("r2", "ok", reply=(session.id, "answer to second"))
        found = await store.compaction_input(session.id, 100)
        turns = split_turns(found.rows, 1000)
        assert [t.upto for t in turns] == [first, second] and found.finished_upto == second
        assert [m.role for m in turns[0].messages] == ["user", "assistant", "tool", "assistant"]
        await summarise(store, session.id, first, "the first turn")
        context = await store.run_context(session.id, "main", 60, 0)
    finally:
        await store.close()
    assert context.summary is not None and context.summary.content == "the first turn"
    assert [(r.kind, r.content) for r in context.rows] == [
        ("user", "second"),
        ("assistant", "answer to second"),
    ]


def _turn(upto: int, chars: int) -> Turn:
    return Turn(upto, [ChatMessage("user", "u" * chars)], 1)


def test_a_session_far_behind_is_caught_up_one_budget_at_a_time_oldest_first() -> None:
    agent = AgentSettings(history_max_chars=1_000)
    turns = [_turn(n, 400) for n in range(1, 21)]
    cover = choose(turns, 0, finished_upto=20, agent=agent, force=True)
    assert [t.upto for t in cover] == [1, 2]


def test_only_turns_a_finished_run_answered_are_summarised_and_the_newest_is_kept() -> None:
    agent = AgentSettings(history_max_chars=1_000)
    turns = [_turn(n, 300) for n in range(1, 6)]
    assert [t.upto for t in choose(turns, 0, finished_upto=2, agent=agent, force=True)] == [1, 2]
    assert [t.upto for t in choose(turns, 0, finished_upto=9, agent=agent, force=True)] == [1, 2, 3]
    assert choose(turns[:1], 0, finished_upto=9, agent=agent, force=True) == []
    # Under budget, nothing goes unless forced.
    assert choose(turns[:3], 0, finished_upto=9, agent=agent, force=False) == []
