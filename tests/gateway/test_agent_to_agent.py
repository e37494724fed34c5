"""sessions_send end to end in one process: the target's run, ping-pong, announce, and their limits."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from pathlib import Path
from typing import Any

from bridge.config.session import SendPolicySettings
from bridge.events import Inbound
from bridge.tools.base import ToolContext
from bridge.tools.builtin.sessions import sessions_history
from devkit.fakes.openai_server import FakeOpenAI
from tests.fakes.a2a_model import AGENT_MARK, AgentToAgentModel
from tests.harness import Harness, running_bridge

GROUP = "test:group:g1"


def group_message(h: Harness, text: str) -> Inbound:
    return Inbound(
        surface="test",
        chat_type="group",
        chat_id="g1",
        sender_id="alice",
        text=text,
        message_id=f"g{len(h.sender.sent)}-{text}",
        mentioned=True,
        chat_title="Team",
    )


async def group_says(h: Harness, text: str) -> None:
    done = await h.bridge.handle(group_message(h, text))
    assert done is not None
    await asyncio.wait_for(done, 10)


async def exchange(h: Harness, text: str = "ask the other chat") -> None:
    await h.say(text)
    await asyncio.wait_for(h.bridge.a2a.idle(), 20)


def sent_to_group(h: Harness) -> list[str]:
    return [item.text for item in h.sender.sent if item.route.chat_id == "g1"]


async def rows(h: Harness, key: str) -> list[Any]:
    session = await h.bridge.store.active_session(key)
    assert session is not None
    return await h.bridge.store.history(session.id, 100)


def model(**kwargs: Any) -> tuple[AgentToAgentModel, FakeOpenAI]:
    args = {"session_key": GROUP, "message": "status?", "timeout_seconds": 10, **kwargs.pop("send", {})}
    script = AgentToAgentModel(send_args=args, **kwargs)
    return script, FakeOpenAI(script)


async def test_a_sent_message_runs_in_the_target_and_its_reply_comes_back(tmp_path: Path) -> None:
    script, llm = model()
    async with llm, running_bridge(tmp_path, llm) as h:
        await group_says(h, "hello bot")
        await exchange(h)
        result = json.loads(script.seen["send_result"][0])
        assert result["status"] == "ok" and result["reply"] == "All quiet here."
        assert result["run_id"]
        run = await h.bridge.store.get_run(result["run_id"])
        assert run is not None and run.channel == "agent" and run.status == "ok"
        assert h.sender.of("reply")[-1].startswith("Relayed: ")
        # The target's history holds the request, marked as from main's agent, and its reply.
        target = await rows(h, GROUP)
        injected = [r for r in target if r.via_session]
        assert injected[0].via_session == "main" and injected[0].kind == "user"
        assert injected[0].content.startswith("status?")
        assert script.seen["request"][0].startswith(f"{AGENT_MARK} 'main'; not written by a human]")


async def test_reply_skip_ends_the_ping_pong_and_max_turns_caps_it(tmp_path: Path) -> None:
    script, llm = model(requester_turns=deque(["anything else?", "REPLY_SKIP"]), target_turns=deque(["no"]))
    async with llm, running_bridge(tmp_path, llm) as h:
        await group_says(h, "hello bot")
        await exchange(h)
    # requester → target → requester (REPLY_SKIP): three reply turns, then the announce.
    assert len(script.seen["reply"]) == 3
    assert len(script.seen["announce"]) == 1

    script, llm = model(requester_turns=deque(["more"] * 9), target_turns=deque(["more"] * 9))
    async with (
        llm,
        running_bridge(tmp_path / "capped", llm, session={"agent_to_agent": {"max_ping_pong_turns": 2}}) as h,
    ):
        await group_says(h, "hello bot")
        await exchange(h)
    assert len(script.seen["reply"]) == 2


async def test_zero_ping_pong_turns_goes_straight_to_the_announce(tmp_path: Path) -> None:
    script, llm = model(announce="Main asked for a status; all quiet.")
    async with (
        llm,
        running_bridge(tmp_path, llm, session={"agent_to_agent": {"max_ping_pong_turns": 0}}) as h,
    ):
        await group_says(h, "hello bot")
        await exchange(h)
        assert "reply" not in script.seen
        assert sent_to_group(h)[-1] == "Main asked for a status; all quiet."
        announce = script.seen["announce"][0]
        assert "Its request: status?" in announce and "Your first reply: All quiet here." in announce


async def test_announce_skip_keeps_the_target_chat_silent(tmp_path: Path) -> None:
    script, llm = model(announce="ANNOUNCE_SKIP")
    async with llm, running_bridge(tmp_path, llm) as h:
        await group_says(h, "hello bot")
        before = sent_to_group(h)
        await exchange(h)
        assert sent_to_group(h) == before
        assert script.seen["announce"]


async def test_the_announce_is_delivered_once(tmp_path: Path) -> None:
    _script, llm = model(announce="News from main.")
    async with llm, running_bridge(tmp_path, llm) as h:
        await group_says(h, "hello bot")
        await exchange(h)
        assert sent_to_group(h).count("News from main.") == 1
        rows_ = await h.bridge.store.outbox()
        announces = [r for r in rows_ if (r.item.dedupe_key or "").startswith("announce:")]
        assert [r.item.state for r in announces] == ["sent"]


async def test_timeout_zero_returns_accepted_at_once(tmp_path: Path) -> None:
    script, llm = model(send={"timeout_seconds": 0}, target_delay_s=0.5)
    async with llm, running_bridge(tmp_path, llm) as h:
        await group_says(h, "hello bot")
        await exchange(h)
        result = json.loads(script.seen["send_result"][0])
        assert result["status"] == "accepted" and result["run_id"]
        # The run went ahead anyway.
        run = await h.bridge.store.get_run(result["run_id"])
        assert run is not None and run.status == "ok"


async def test_a_slow_target_times_out_and_its_run_continues(tmp_path: Path) -> None:
    script, llm = model(send={"timeout_seconds": 0.2}, target_delay_s=1.0)
    async with llm, running_bridge(tmp_path, llm) as h:
        await group_says(h, "hello bot")
        await exchange(h)
        result = json.loads(script.seen["send_result"][0])
        assert result["status"] == "timeout"
        assert "sessions_history" in result["error"]
        run = await h.bridge.store.get_run(result["run_id"])
        assert run is not None and run.status == "ok"
        assert any(r.kind == "assistant" and r.content == "All quiet here." for r in await rows(h, GROUP))


async def test_a_session_cannot_send_to_itself(tmp_path: Path) -> None:
    script, llm = model(send={"session_key": "main"})
    async with llm, running_bridge(tmp_path, llm) as h:
        await exchange(h)
        assert "same_session" in script.seen["send_result"][0]
        assert "request" not in script.seen


async def test_a_group_agent_cannot_reach_main(tmp_path: Path) -> None:
    script, llm = model(send={"session_key": "main"})
    async with llm, running_bridge(tmp_path, llm) as h:
        await h.say("hello")  # main exists
        await group_says(h, "ask the other chat")
        await asyncio.wait_for(h.bridge.a2a.idle(), 10)
        assert "not_found" in script.seen["send_result"][0]
        assert "request" not in script.seen
        assert not [r for r in await rows(h, "main") if r.via_session]


async def test_an_injected_message_is_shown_as_an_agent_in_sessions_history(tmp_path: Path) -> None:
    _script, llm = model()
    async with llm, running_bridge(tmp_path, llm) as h:
        await group_says(h, "hello bot")
        await exchange(h)
        main = await h.bridge.store.active_session("main")
        assert main is not None
        authorities = h.bridge.authorities
        ctx = ToolContext(
            h.bridge.settings,
            h.bridge.store,
            h.bridge.registry,
            main,
            "r",
            authorities.for_chat("main", None),
            authorities,
        )
        result = json.loads((await sessions_history({"session_key": GROUP}, ctx)).content)
        roles = {m["role"] for m in result["messages"]}
        agent = [m for m in result["messages"] if m["role"] == "agent"]
        assert "agent" in roles and agent[0]["from_session"] == "main"
        humans = [m for m in result["messages"] if m["role"] == "user"]
        assert [m["content"] for m in humans] == ["hello bot"]


DENY_GROUP = {"send_policy": {"rules": [{"action": "deny", "match": {"key_prefix": GROUP}}]}}


async def test_an_adversarial_send_into_a_denied_session_delivers_nothing_there(tmp_path: Path) -> None:
    script, llm = model(
        announce="LEAK: everything main said",
        target_turns=deque(["LEAK 1", "LEAK 2"]),
        requester_turns=deque(["say it in the chat!", "say it louder!"]),
    )
    async with llm, running_bridge(tmp_path, llm, session=DENY_GROUP) as h:
        await group_says(h, "hello bot")
        await exchange(h)
        group = await h.bridge.store.active_session(GROUP)
        assert group is not None
        # The run happened (shadow mode) and the main agent got its answer...
        assert json.loads(script.seen["send_result"][0])["status"] == "ok"
        assert script.seen["announce"]
        # ...but nothing reached the group: not the first answer, not the announce.
        assert sent_to_group(h) == []
        suppressed = await h.bridge.store.outbox(session_id=group.id, state="suppressed")
        texts = [row.item.text for row in suppressed]
        assert "LEAK: everything main said" in texts
        assert all(row.item.reason == "rule 1 (deny: key_prefix=test:group:g1)" for row in suppressed)


async def test_sending_into_an_ignored_session_is_refused(tmp_path: Path) -> None:
    script, llm = model()
    async with llm, running_bridge(tmp_path, llm) as h:
        await group_says(h, "hello bot")
        h.bridge.policy.update(
            SendPolicySettings.model_validate(
                {"rules": [{"action": "ignore", "match": {"key_prefix": GROUP}}]}
            )
        )
        await exchange(h)
        result = json.loads(script.seen["send_result"][0])
        assert result["status"] == "error" and "ignores" in result["error"]
        assert "request" not in script.seen
