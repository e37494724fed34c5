"""The gateway: commands, lanes, redeliveries, activity and reply as separate messages."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from tests.harness import running_bridge
from tests.invariants import assert_intact


class GatedModel:
    """Answers each request only when the test opens its gate; records which chats were in flight."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.in_flight: dict[str, int] = {}
        self.max_in_flight: dict[str, int] = {}
        self.arrived: asyncio.Queue[str] = asyncio.Queue()

    def gate(self, text: str) -> asyncio.Event:
        return self.gates.setdefault(text, asyncio.Event())

    async def __call__(self, request: dict[str, Any]) -> Reply:
        user = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
        chat = user.split(":")[0]
        self.in_flight[chat] = self.in_flight.get(chat, 0) + 1
        self.max_in_flight[chat] = max(self.max_in_flight.get(chat, 0), self.in_flight[chat])
        await self.arrived.put(user)
        try:
            await self.gate(user).wait()
        finally:
            self.in_flight[chat] -= 1
        return fake.text(f"answer to {user}")


async def test_activity_is_one_message_edited_in_place_and_the_reply_is_separate(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "sessions"}),
        fake.tool_call("sessions_list", {"limit": 5}),
        fake.text("You have one session."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("my sessions?")
    kinds = [item.kind for item in h.sender.sent]
    assert kinds == ["activity", "reply"]
    activity, reply = h.sender.sent
    final_edit = h.sender.edits[-1]
    assert final_edit[0] == "1"
    assert final_edit[1] == "⚙ load_tool_group(group_name=sessions) ✓\n⚙ sessions_list(limit=5) ✓"
    assert activity.route.reply_to is None
    assert reply.route.reply_to == "1" and reply.text == "You have one session."


async def test_a_failed_tool_is_marked_in_the_activity(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.tool_call("pdf_info", {}), fake.text("no"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("pdf?")
    assert h.sender.edits[-1][1] == "⚙ pdf_info() ✗ unknown_tool"


async def test_a_redelivered_platform_message_is_answered_once(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("once"))
    async with running_bridge(tmp_path, fake_llm) as h:
        inbound = h.inbound("hello")
        done = await h.bridge.handle(inbound)
        assert await h.bridge.handle(inbound) is None
        await asyncio.wait_for(done, 5)
    assert h.sender.of("reply") == ["once"]
    assert len(fake_llm.requests) == 1


async def test_runs_of_one_session_never_overlap_and_queued_messages_are_answered_together(
    tmp_path: Path,
) -> None:
    model = GatedModel()
    async with FakeOpenAI(model) as llm, running_bridge(tmp_path, llm) as h:
        first = await h.bridge.handle(h.inbound("a:1"))
        assert await asyncio.wait_for(model.arrived.get(), 5) == "a:1"
        second = await h.bridge.handle(h.inbound("a:2"))
        third = await h.bridge.handle(h.inbound("a:3"))
        model.gate("a:1").set()
        await asyncio.wait_for(first, 5)
        # The follow-up run sees both queued messages, in order, after the first answer.
        assert await asyncio.wait_for(model.arrived.get(), 5) == "a:3"
        model.gate("a:3").set()
        await asyncio.wait_for(asyncio.gather(second, third), 5)
        follow_up = [m["content"] for m in llm.requests[1]["messages"][1:]]
    assert follow_up == ["a:1", "answer to a:1", "a:2", "a:3"]
    assert model.max_in_flight["a"] == 1
    assert h.sender.of("reply") == ["answer to a:1", "answer to a:3"]


async def test_a_slow_session_does_not_block_another(tmp_path: Path) -> None:
    model = GatedModel()
    async with FakeOpenAI(model) as llm, running_bridge(tmp_path, llm) as h:
        slow = await h.bridge.handle(h.inbound("a:slow", sender="alice"))
        assert await asyncio.wait_for(model.arrived.get(), 5) == "a:slow"
        quick = await h.bridge.handle(h.inbound("b:quick", sender="bob"))
        assert await asyncio.wait_for(model.arrived.get(), 5) == "b:quick"
        model.gate("b:quick").set()
        await asyncio.wait_for(quick, 5)
        assert not slow.done()
        model.gate("a:slow").set()
        await asyncio.wait_for(slow, 5)
    assert h.sender.of("reply") == ["answer to b:quick", "answer to a:slow"]


async def test_clear_cancels_the_run_in_flight_so_its_reply_never_reaches_the_new_session(
    tmp_path: Path,
) -> None:
    model = GatedModel()
    async with FakeOpenAI(model) as llm, running_bridge(tmp_path, llm) as h:
        store = h.bridge.store
        old = await store.ensure_active_session("main")
        pending = await h.bridge.handle(h.inbound("a:long question"))
        assert await asyncio.wait_for(model.arrived.get(), 5) == "a:long question"
        await h.say("/clear")
        await asyncio.wait_for(pending, 5)
        model.gate("a:long question").set()  # a late answer, if anyone were still waiting for it
        new = await store.active_session("main")
        assert new is not None and new.id != old.id
        assert await store.count_messages(new.id) == 0
        assert await store.loaded_groups(new.id) == set()
        old_rows = await store.history(old.id, 100)
        runs = await store._rows("SELECT status FROM runs WHERE session_id = ?", (old.id,))
    assert [r.kind for r in old_rows] == ["user"]
    assert [r[0] for r in runs] == ["cancelled"]
    assert h.sender.of("reply") == []
    assert "Started a new session" in h.sender.of("notice")[-1]


async def test_stop_aborts_the_running_answer_and_says_so(tmp_path: Path) -> None:
    model = GatedModel()
    async with FakeOpenAI(model) as llm, running_bridge(tmp_path, llm) as h:
        pending = await h.bridge.handle(h.inbound("a:question"))
        await asyncio.wait_for(model.arrived.get(), 5)
        await h.say("/stop")
        await asyncio.wait_for(pending, 5)
        await h.say("/stop")
    assert h.sender.of("notice") == ["Stopped the answer in progress.", "Nothing is running."]
    assert h.sender.of("reply") == []


async def test_status_shows_the_session_its_groups_and_message_count(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.tool_call("load_tool_group", {"group_name": "files"}), fake.text("loaded"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("load files")
        await h.say("/status")
        session = await h.bridge.store.active_session("main")
    status = h.sender.of("notice")[-1]
    assert session is not None and f"Session: {session.id} (key main" in status
    assert "Loaded tool groups: files" in status
    assert "Messages: 4" in status


async def test_commands_addressed_with_a_bot_name_are_understood(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("/help@bridge_bot")
        await h.say("/frobnicate")
    help_text, unknown = h.sender.of("notice")
    assert "/clear" in help_text and "/status" in help_text
    assert "Unknown command /frobnicate" in unknown
    assert fake_llm.requests == []


async def test_non_owner_dm_gets_its_own_session_never_main(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("hi stranger"), fake.text("hi owner"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("hello", sender="stranger")
        await h.say("hello", sender="owner")
        stranger = await h.bridge.store.active_session("test:dm:stranger")
        main = await h.bridge.store.active_session("main")
    assert stranger is not None and main is not None and stranger.id != main.id
    assert [m["content"] for m in fake_llm.requests[1]["messages"][1:]] == ["hello"]


async def test_new_is_an_alias_of_clear(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "web"}), fake.text("ok"), fake.text("fresh")
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("load web")
        before = await h.bridge.store.active_session("main")
        await h.say("/new")
        await h.say("hello")
        after = await h.bridge.store.active_session("main")
    assert before is not None and after is not None and before.id != after.id
    assert h.request_tools(h.first_request_of_turn("hello")) == [
        "load_tool_group",
        "get_current_time",
        "search_history",
        "save_memory",
    ]


async def test_followup_mode_gives_each_queued_message_its_own_turn_in_order(tmp_path: Path) -> None:
    model = GatedModel()
    async with FakeOpenAI(model) as llm, running_bridge(tmp_path, llm, runs={"queue_mode": "followup"}) as h:
        first = await h.bridge.handle(h.inbound("a:1"))
        assert await asyncio.wait_for(model.arrived.get(), 5) == "a:1"
        later = [await h.bridge.handle(h.inbound(f"a:{n}")) for n in (2, 3)]
        for n in (1, 2, 3):
            model.gate(f"a:{n}").set()
        await asyncio.wait_for(asyncio.gather(first, *later), 10)
    # Each turn saw the messages before it, answered, and nothing after it.
    lasts = [r["messages"][-1]["content"] for r in llm.requests]
    assert lasts == ["a:1", "a:2", "a:3"]
    second_turn = [m["content"] for m in llm.requests[1]["messages"][1:]]
    assert second_turn == ["a:1", "answer to a:1", "a:2"]
    assert h.sender.of("reply") == ["answer to a:1", "answer to a:2", "answer to a:3"]
    assert model.max_in_flight["a"] == 1


async def test_a_full_queue_refuses_a_message_with_a_notice_and_does_not_store_it(tmp_path: Path) -> None:
    model = GatedModel()
    async with FakeOpenAI(model) as llm, running_bridge(tmp_path, llm, runs={"max_queued": 2}) as h:
        first = await h.bridge.handle(h.inbound("a:1"))
        await asyncio.wait_for(model.arrived.get(), 5)
        queued = [await h.bridge.handle(h.inbound(f"a:{n}")) for n in (2, 3)]
        refused = await h.bridge.handle(h.inbound("a:4"))
        assert refused is not None
        await asyncio.wait_for(refused, 5)  # the notice has been sent
        assert h.sender.of("notice") == [
            "⚠️ 2 messages are already waiting for an answer here, so I did not take this one. "
            "Please send it again once I have caught up."
        ]
        model.gate("a:1").set()
        model.gate("a:3").set()
        await asyncio.wait_for(asyncio.gather(first, *queued), 10)
        session = await h.bridge.store.active_session("main")
        assert session is not None
        stored = [r.content for r in await h.bridge.store.history(session.id, 20) if r.kind == "user"]
        assert stored == ["a:1", "a:2", "a:3"]
        # Once the queue has drained, the next message is taken and answered.
        model.gate("a:5").set()
        await h.say("a:5")
        assert h.sender.of("reply")[-1] == "answer to a:5"
    assert_intact(tmp_path / "bridge.db", ["a:1", "a:2", "a:3", "a:5"])
