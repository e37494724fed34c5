"""Sub-agents (spawn_agent) end to end in one process: where the child's answer goes, what it sees,
whose authority it acts with, depth 1, its limit, /stop and /clear, and its run under its parent's."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bridge.cli.store import show_trace
from bridge.events import Inbound
from bridge.sessions import keys
from bridge.store.base import RunRow
from devkit.fakes.openai_server import FakeOpenAI, Reply, text, tool_call
from tests.harness import Harness, running_bridge

SUBAGENT_NOTE = "You are a sub-agent"
CHILD_ANSWER = "There are 7 stars."
GROUP = "test:group:g1"


@dataclass
class SpawnModel:
    """One model for parent and child, telling them apart by the child's task message.

    A person's message containing "delegate" makes the parent load `sessions` and call spawn_agent with
    `spawn` (each entry one call, in turn); its answer quotes the last tool result. The child makes
    `child_calls` one by one, then waits for `child_gate` (when set) and answers `child_answer`.
    """

    spawn: list[dict[str, Any]]
    child_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    child_answer: str = CHILD_ANSWER
    child_delay_s: float = 0.0
    child_gate: asyncio.Event | None = None
    # Set once a child's first request has come: it is running.
    child_began: asyncio.Event = field(default_factory=asyncio.Event)
    parent_requests: list[dict[str, Any]] = field(default_factory=list)
    child_requests: list[dict[str, Any]] = field(default_factory=list)
    # The content of each tool result the parent got from spawn_agent, and the child from its calls.
    spawn_results: list[dict[str, Any]] = field(default_factory=list)
    child_results: list[str] = field(default_factory=list)

    async def __call__(self, request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        last = messages[-1]
        if any(m["role"] == "user" and SUBAGENT_NOTE in str(m.get("content")) for m in messages):
            return await self._child(request, messages, last)
        self.parent_requests.append(request)
        if last["role"] == "tool":
            if _last_call(messages) == "spawn_agent":
                self.spawn_results.append(outcome(str(last["content"])))
            spawned = _calls_this_turn(messages, "spawn_agent")
            if spawned < len(self.spawn):
                return tool_call("spawn_agent", self.spawn[spawned])
            return text(f"Parent relays: {last['content']}")
        content = str(last.get("content") or "")
        if "delegate" in content:
            return tool_call("load_tool_group", {"group_name": "sessions"})
        return text(f"ok: {content}")

    async def _child(self, request: dict[str, Any], messages: list[dict[str, Any]], last: Any) -> Reply:
        self.child_requests.append(request)
        self.child_began.set()
        if last["role"] == "tool":
            self.child_results.append(str(last["content"]))
        made = sum(1 for m in messages if m["role"] == "tool")
        if made < len(self.child_calls):
            return tool_call(*self.child_calls[made])
        if self.child_gate is not None:
            await self.child_gate.wait()
        if self.child_delay_s:
            await asyncio.sleep(self.child_delay_s)
        return text(self.child_answer)


def outcome(content: str) -> dict[str, Any]:
    """A tool result as data: its JSON, or {"error": {"code", "message"}} for "Error [code]: message"."""
    refused = re.fullmatch(r"Error \[(\w+)\]: (.*)", content, re.DOTALL)
    if refused:
        return {"error": {"code": refused[1], "message": refused[2]}}
    return dict(json.loads(content))


def _calls_this_turn(messages: list[dict[str, Any]], name: str) -> int:
    """How many calls of `name` the model made since the person's last message."""
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    turn = messages[last_user + 1 :]
    return sum(1 for m in turn for c in m.get("tool_calls") or [] if c["function"]["name"] == name)


def _last_call(messages: list[dict[str, Any]]) -> str | None:
    for message in reversed(messages):
        for call in reversed(message.get("tool_calls") or []):
            return str(call["function"]["name"])
    return None


def bot(tmp_path: Path, script: SpawnModel, **sections: Any) -> tuple[FakeOpenAI, Any]:
    llm = FakeOpenAI(script)
    return llm, running_bridge(tmp_path, llm, **sections)


async def child_runs(h: Harness) -> list[RunRow]:
    runs = await h.bridge.store.list_runs(session_key=None, limit=50)
    return [run for run, _key in runs if run.channel == "subagent"]


async def parent_run(h: Harness) -> RunRow:
    runs = await h.bridge.store.list_runs(session_key="main", limit=50)
    return next(run for run, _key in runs if run.kind == "turn")


def replies_in_main(h: Harness) -> list[str]:
    return [item.text for item in h.sender.sent if item.session_key == "main" and item.kind == "reply"]


async def test_with_wait_the_childs_answer_returns_to_the_parent(tmp_path: Path) -> None:
    script = SpawnModel(spawn=[{"task": "count the stars"}])
    llm, running = bot(tmp_path, script)
    async with llm, running as h:
        await h.say("delegate the counting")
        await asyncio.wait_for(h.bridge.subagents.idle(), 10)
        result = script.spawn_results[0]
        assert result["status"] == "ok" and result["answer"] == CHILD_ANSWER
        main = await h.bridge.store.active_session("main")
        assert main is not None
        assert result["session_key"] == f"agent:{main.id}:1"
        # The answer went to the parent only: the chat heard the parent's reply and nothing else.
        assert len(replies_in_main(h)) == 1 and CHILD_ANSWER in replies_in_main(h)[0]
        # The run rows link parent and child.
        parent = await parent_run(h)
        [child] = await child_runs(h)
        assert child.id == result["run_id"] and child.parent_run_id == parent.id and child.status == "ok"
        assert [run.id for run in await h.bridge.store.child_runs(parent.id)] == [child.id]


async def test_children_of_one_session_are_numbered_and_each_starts_empty(tmp_path: Path) -> None:
    script = SpawnModel(spawn=[{"task": "first job"}, {"task": "second job"}])
    llm, running = bot(tmp_path, script)
    async with llm, running as h:
        await h.say("delegate two jobs")
        main = await h.bridge.store.active_session("main")
        assert main is not None
        assert [r["session_key"] for r in script.spawn_results] == [
            str(keys.agent(main.id, 1)),
            str(keys.agent(main.id, 2)),
        ]
        # The second child's context holds its own task alone, not the first child's.
        second = script.child_requests[-1]["messages"]
        assert [m["role"] for m in second] == ["system", "user"]
        assert "second job" in second[1]["content"] and "first job" not in json.dumps(second)


async def test_the_child_sees_its_task_and_none_of_the_parents_history(tmp_path: Path) -> None:
    script = SpawnModel(spawn=[{"task": "count the stars"}])
    llm, running = bot(tmp_path, script)
    async with llm, running as h:
        await h.say("my locker code is 4471")
        await h.say("delegate the counting")
    assert "4471" in json.dumps(script.parent_requests[-1])
    for request in script.child_requests:
        assert "4471" not in json.dumps(request)
        users = [m for m in request["messages"] if m["role"] == "user"]
        assert len(users) == 1 and "count the stars" in users[0]["content"]
        # Marked as from the parent's agent, never as a person's words.
        assert "not written by a human" in users[0]["content"]


async def test_without_wait_the_answer_reaches_the_chat_later_once(tmp_path: Path) -> None:
    script = SpawnModel(spawn=[{"task": "count the stars", "wait": False}], child_delay_s=0.3)
    llm, running = bot(tmp_path, script)
    async with llm, running as h:
        await h.say("delegate the counting")
        result = script.spawn_results[0]
        assert result["status"] == "started"
        # The parent answered without the child's answer.
        assert CHILD_ANSWER not in replies_in_main(h)[0]
        await asyncio.wait_for(h.bridge.subagents.idle(), 10)
        posted = [t for t in replies_in_main(h) if CHILD_ANSWER in t]
        assert len(posted) == 1 and posted[0].startswith('Sub-agent result for "count the stars"')
        rows = [r for r in await h.bridge.store.outbox() if (r.item.dedupe_key or "").startswith("spawn:")]
        assert [(r.item.dedupe_key, r.item.state) for r in rows] == [(f"spawn:{result['run_id']}", "sent")]


async def test_a_wait_that_runs_out_returns_and_the_answer_is_posted_later(tmp_path: Path) -> None:
    script = SpawnModel(spawn=[{"task": "count the stars"}], child_delay_s=1.0)
    llm, running = bot(tmp_path, script, agent={"subagent_wait_s": 0.2})
    async with llm, running as h:
        await h.say("delegate the counting")
        result = script.spawn_results[0]
        assert result["status"] == "running" and "posted in this chat" in result["note"]
        await asyncio.wait_for(h.bridge.subagents.idle(), 10)
        assert len([t for t in replies_in_main(h) if CHILD_ANSWER in t]) == 1
        [child] = await child_runs(h)
        assert child.status == "ok"


async def test_stop_in_the_parents_chat_stops_the_parent_and_its_child(tmp_path: Path) -> None:
    gate = asyncio.Event()
    script = SpawnModel(spawn=[{"task": "count the stars"}], child_gate=gate)
    llm, running = bot(tmp_path, script)
    async with llm, running as h:
        try:
            turn = await h.bridge.handle(h.inbound("delegate the counting"))
            await asyncio.wait_for(script.child_began.wait(), 10)
            before = len(h.sender.sent)
            await h.say("/stop")
            assert [i.text for i in h.sender.sent[before:]] == [
                "Stopped the answer in progress and 1 sub-agent."
            ]
            assert turn is not None
            await asyncio.wait_for(turn, 10)
            await asyncio.wait_for(h.bridge.subagents.idle(), 10)
            assert (await parent_run(h)).status == "cancelled"
            assert [run.status for run in await child_runs(h)] == ["cancelled"]
            assert not [t for t in replies_in_main(h) if CHILD_ANSWER in t]
        finally:
            gate.set()


async def test_stop_after_the_parent_answered_stops_a_child_that_goes_on(tmp_path: Path) -> None:
    gate = asyncio.Event()
    script = SpawnModel(spawn=[{"task": "count the stars", "wait": False}], child_gate=gate)
    llm, running = bot(tmp_path, script)
    async with llm, running as h:
        try:
            await h.say("delegate the counting")
            await asyncio.wait_for(script.child_began.wait(), 10)
            before = len(h.sender.sent)
            await h.say("/stop")
            assert [i.text for i in h.sender.sent[before:]] == ["Stopped 1 sub-agent."]
            await asyncio.wait_for(h.bridge.subagents.idle(), 10)
            assert [run.status for run in await child_runs(h)] == ["cancelled"]
        finally:
            gate.set()
        assert not [t for t in replies_in_main(h) if CHILD_ANSWER in t]


async def test_clear_in_the_parents_chat_stops_its_children(tmp_path: Path) -> None:
    gate = asyncio.Event()
    script = SpawnModel(spawn=[{"task": "count the stars", "wait": False}], child_gate=gate)
    llm, running = bot(tmp_path, script)
    async with llm, running as h:
        try:
            await h.say("delegate the counting")
            await asyncio.wait_for(script.child_began.wait(), 10)
            await h.say("/clear")
            await asyncio.wait_for(h.bridge.subagents.idle(), 10)
            assert [run.status for run in await child_runs(h)] == ["cancelled"]
        finally:
            gate.set()


async def test_a_child_cannot_spawn_and_is_not_offered_the_tool(tmp_path: Path) -> None:
    calls = [("load_tool_group", {"group_name": "sessions"}), ("spawn_agent", {"task": "go deeper"})]
    script = SpawnModel(spawn=[{"task": "count the stars"}], child_calls=calls)
    llm, running = bot(tmp_path, script)
    async with llm, running as h:
        await h.say("delegate the counting")
        refused = outcome(script.child_results[-1])
        assert refused["error"]["code"] == "not_allowed"
        assert "cannot start another sub-agent" in refused["error"]["message"]
        # After loading `sessions`, the child is offered its other tools, never spawn_agent.
        offered = {t["function"]["name"] for t in script.child_requests[-1]["tools"]}
        assert {"sessions_list", "sessions_history"} <= offered and "spawn_agent" not in offered
        # The parent is offered it.
        assert "spawn_agent" in {t["function"]["name"] for t in script.parent_requests[-1]["tools"]}
        assert len(await child_runs(h)) == 1


async def test_a_members_child_acts_as_that_member_in_its_own_session_only(tmp_path: Path) -> None:
    calls = [("load_tool_group", {"group_name": "sessions"}), ("sessions_history", {"session_key": "main"})]
    script = SpawnModel(spawn=[{"task": "read main's history"}], child_calls=calls)
    llm, running = bot(tmp_path, script)
    async with llm, running as h:
        await h.say("my locker code is 4471")
        done = await h.bridge.handle(
            Inbound("test", "group", "g1", "alice", "delegate: read main", message_id="m1", mentioned=True)
        )
        assert done is not None
        await asyncio.wait_for(done, 10)
        refused = outcome(script.child_results[-1])
        assert refused["error"]["code"] == "not_found"
        assert "4471" not in json.dumps(script.child_requests)
        [child] = await child_runs(h)
        trace = await h.bridge.store.get_trace(child.id)
        assert trace is not None
        group = await h.bridge.store.active_session(GROUP)
        assert group is not None
        acting = json.loads(trace)["acting_for"]
        assert acting == f"member test:alice in agent:{group.id}:1 via spawn:{GROUP}"


async def test_no_more_than_max_subagents_run_at_once_for_a_chat(tmp_path: Path) -> None:
    gate = asyncio.Event()
    spawn = [{"task": "job one", "wait": False}, {"task": "job two", "wait": False}]
    script = SpawnModel(spawn=spawn, child_gate=gate)
    llm, running = bot(tmp_path, script, agent={"max_subagents": 1})
    async with llm, running as h:
        try:
            await h.say("delegate two jobs")
            first, second = script.spawn_results
            assert first["status"] == "started"
            assert second["error"]["code"] == "limit"
        finally:
            gate.set()
        await asyncio.wait_for(h.bridge.subagents.idle(), 10)
        assert len(await child_runs(h)) == 1


@pytest.mark.parametrize(
    ("spawn", "sections", "code", "words"),
    [
        ({"agent": "nobody"}, {}, "unknown_agent", "There is no agent named 'nobody'"),
        ({}, {"agent": {"max_subagents": 0}}, "unavailable", "turned off"),
    ],
)
async def test_a_spawn_that_cannot_start_is_refused_in_plain_words(
    tmp_path: Path, spawn: dict[str, Any], sections: dict[str, Any], code: str, words: str
) -> None:
    script = SpawnModel(spawn=[{"task": "count the stars", **spawn}])
    llm, running = bot(tmp_path, script, **sections)
    async with llm, running as h:
        await h.say("delegate the counting")
        refused = script.spawn_results[0]
        assert refused["error"]["code"] == code and words in refused["error"]["message"]
        assert not script.child_requests and not await child_runs(h)


async def test_the_run_page_and_bridge_trace_show_the_child_under_its_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.http.conftest import admin_bridge, client_of

    script = SpawnModel(spawn=[{"task": "count the stars"}])
    async with FakeOpenAI(script) as llm, admin_bridge(tmp_path, llm) as (h, _server, base):
        await h.say("delegate the counting")
        parent = await parent_run(h)
        [child] = await child_runs(h)
        async with client_of(base) as client:
            page = (await client.get(f"/runs/{parent.id}")).text
            assert "Sub-agents" in page and f'href="/runs/{child.id}"' in page
            page = (await client.get(f"/runs/{child.id}")).text
            assert f'href="/runs/{parent.id}"' in page
            detail = (await client.get(f"/api/runs/{parent.id}")).json()
            assert [c["id"] for c in detail["children"]] == [child.id]
        settings = h.bridge.settings
    assert await show_trace(settings, parent.id, as_json=False) == 0
    assert f"sub-agent run {child.id}: ok" in capsys.readouterr().out


AGENTS = {
    "support": {"system_prompt": "You are Support.", "tool_groups": ["sessions"]},
    "helper": {"system_prompt": "You are Helper."},
    "bindings": [{"agent": "support", "match": {"chat_type": "group"}}],
}


def group_says(text: str) -> Inbound:
    return Inbound("test", "group", "g1", "alice", text, message_id=f"g-{text}", mentioned=True)


async def test_a_child_runs_on_its_parent_chats_agent(tmp_path: Path) -> None:
    script = SpawnModel(spawn=[{"task": "count the stars"}])
    llm, running = bot(tmp_path, script, agents=AGENTS)
    async with llm, running as h:
        done = await h.bridge.handle(group_says("delegate the counting"))
        assert done is not None
        await asyncio.wait_for(done, 10)
        assert script.spawn_results[0]["status"] == "ok"
        child = await h.bridge.store.active_session(script.spawn_results[0]["session_key"])
        assert child is not None and child.agent == "support"
        assert "You are Support." in script.child_requests[0]["messages"][0]["content"]


async def test_only_an_owner_may_run_a_child_as_another_agent(tmp_path: Path) -> None:
    script = SpawnModel(spawn=[{"task": "count the stars", "agent": "helper"}])
    llm, running = bot(tmp_path, script, agents=AGENTS)
    async with llm, running as h:
        done = await h.bridge.handle(group_says("delegate the counting"))
        assert done is not None
        await asyncio.wait_for(done, 10)
        refused = script.spawn_results[0]
        assert refused["error"]["code"] == "not_allowed" and "(support)" in refused["error"]["message"]
        assert not script.child_requests
        # The owner, in main, may.
        await h.say("delegate the counting")
        assert script.spawn_results[1]["status"] == "ok"
        assert "You are Helper." in script.child_requests[0]["messages"][0]["content"]


async def test_a_task_runs_child_posts_its_answer_in_the_chat_the_task_acts_in(tmp_path: Path) -> None:
    script = SpawnModel(spawn=[], child_delay_s=0.1)
    llm, running = bot(tmp_path, script)
    async with llm, running as h:
        await h.say("hello")  # main has an address now
        task_session = await h.bridge.store.ensure_active_session("cron:daily")
        owner = h.bridge.authorities.for_chat("main", "test:owner")
        authority = h.bridge.authorities.of_task(
            owner.to_json(), chat_key="main", deliver_to="main", task_id="daily"
        )
        started = await h.bridge.subagents.spawn(
            task_session, "firing", authority, "count the stars", agent=None, wait=False
        )
        assert started.ok, started.content
        await asyncio.wait_for(h.bridge.subagents.idle(), 10)
        assert len([t for t in replies_in_main(h) if CHILD_ANSWER in t]) == 1
