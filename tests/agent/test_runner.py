"""The run loop's guards: structured history, repeats, the failure breaker, caps, errors, timeouts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from bridge.app import Bridge
from bridge.errors import StoreError
from bridge.llm.base import Completion
from bridge.tools.base import Tool, ToolContext, ToolGroup, ToolResult, params
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import Harness, RecordingSender, make_settings, running_bridge


def tool_contents(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def last_run_id(sender: RecordingSender) -> str:
    """The run that sent the last item (every reply and notice of a run carries the run's id)."""
    run_id = sender.sent[-1].run_id
    assert run_id is not None
    return run_id


async def main_history(h: Any) -> list[Any]:
    session = await h.bridge.store.active_session("main")
    return await h.bridge.store.history(session.id, 1000)


async def test_history_is_replayed_as_structured_messages_not_pasted_into_user_text(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("get_current_time", {"timezone": "UTC"}, call_id="t1", content="Let me check."),
        fake.text("It is noon."),
        fake.text("You're welcome."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("list files in .")
        await h.say("create a file foo.txt")
    turn2 = fake_llm.requests[2]["messages"]
    assert [m["role"] for m in turn2] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert turn2[-1]["content"] == "create a file foo.txt"
    assert turn2[2]["content"] == "Let me check."
    assert turn2[2]["tool_calls"] == [
        {
            "id": "t1",
            "type": "function",
            "function": {"name": "get_current_time", "arguments": '{"timezone":"UTC"}'},
        }
    ]
    assert turn2[3]["tool_call_id"] == "t1" and '"timezone": "UTC"' in turn2[3]["content"]
    assert turn2[4] == {"role": "assistant", "content": "It is noon."}


async def test_an_immediately_repeated_call_ends_the_loop_with_one_request_for_an_answer_without_tools(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("get_current_time", {}),
        fake.tool_call("get_current_time", {}),
        fake.text("It is now."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
        rows = await main_history(h)
        run = await h.bridge.store.get_run(last_run_id(h.sender))
        trace = json.loads(await h.bridge.store.get_trace(last_run_id(h.sender)) or "{}")
    final = fake_llm.requests[2]
    assert "tools" not in final
    assert final["messages"][-1]["role"] == "user" and "final answer" in final["messages"][-1]["content"]
    # The repeat never ran and is not replayed: the last call in the request is the one that ran.
    assert len([m for m in final["messages"] if m.get("tool_calls")]) == 1
    assert h.sender.of("reply") == ["It is now."]
    assert [r.tool_status for r in rows if r.kind == "tool_call"] == ["success"]
    assert rows[-1].kind == "assistant" and rows[-1].content == "It is now."
    assert run is not None and run.status == "stopped"
    assert run.error is not None and "kept calling `get_current_time`" in run.error
    assert trace["steps"][-1]["final_without_tools"] is True


async def test_three_identical_failing_calls_end_the_run_with_a_clear_message(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    bad = {"timezone": "Mars/Olympus"}
    fake_llm.push(
        *(fake.tool_call("get_current_time", bad) for _ in range(3)),
        fake.text("Mars has no time zone I know of."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time on mars?")
        reply = h.sender.of("reply")[-1]
        run = await h.bridge.store.get_run(last_run_id(h.sender))
    assert len(fake_llm.requests) == 4 and "tools" not in fake_llm.requests[3]
    assert reply == "Mars has no time zone I know of."
    assert run is not None and run.status == "stopped"


async def test_when_the_last_request_fails_too_the_reply_says_why_the_run_stopped(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    bad = {"timezone": "Mars/Olympus"}
    fake_llm.push(*(fake.tool_call("get_current_time", bad) for _ in range(3)), fake.http_error(400, "no"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time on mars?")
        reply = h.sender.of("reply")[-1]
    assert "get_current_time" in reply and "3 times in a row" in reply and "invalid_timezone" in reply


async def test_a_model_that_only_repeats_its_call_gets_a_clear_message_after_one_last_request(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # What a small real model does after a tool result: call the same tool again, and again, even
    # when offered no tools at all.
    fake_llm.push(*(fake.tool_call("get_current_time", {"timezone": "UTC"}) for _ in range(12)))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("what time is it? use your tool")
        rows = await main_history(h)
        [(run, _)] = await h.bridge.store.list_runs(session_key="main", limit=1)
    assert len(fake_llm.requests) == 3
    assert [r.tool_status for r in rows if r.kind == "tool_call"] == ["success"]
    # The time it has is the answer, in plain words; the rule that stopped the run is the run's.
    assert h.sender.of("reply")[-1].startswith("It's ") and h.sender.of("reply")[-1].endswith("(UTC).")
    assert "kept calling `get_current_time`" in (run.error or "")
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("/status")
    assert (
        "Last answer: cut short, ⚠️ I stopped: the model kept calling `get_current_time`"
        in (h.sender.of("notice")[-1])
    )


async def test_a_failed_call_may_be_retried_once_without_tripping_the_breaker(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    bad = {"timezone": "Mars/Olympus"}
    fake_llm.push(
        fake.tool_call("get_current_time", bad),
        fake.tool_call("get_current_time", bad),
        fake.tool_call("get_current_time", {"timezone": "UTC"}),
        fake.text("done"),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
    assert h.sender.of("reply") == ["done"]


async def test_the_iteration_cap_is_configurable_and_ends_with_an_answer_from_what_was_found(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        *(fake.tool_call("get_current_time", {"timezone": z}) for z in ("UTC", "Europe/Berlin")),
        fake.text("Noon in London, one in Berlin."),
    )
    async with running_bridge(tmp_path, fake_llm, agent={"max_iterations": 2}) as h:
        await h.say("time everywhere")
        rows = await main_history(h)
    assert len(fake_llm.requests) == 3 and "tools" not in fake_llm.requests[2]
    assert h.sender.of("reply")[-1] == "Noon in London, one in Berlin."
    assert rows[-1].kind == "assistant" and rows[-1].content == "Noon in London, one in Berlin."


async def test_a_model_server_error_tells_the_user_and_the_session_still_works(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.http_error(500, "overloaded"), fake.text("back again"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("first")
        await h.say("second")
        rows = await main_history(h)
    first, second = h.sender.of("reply")
    assert first.startswith("⚠️") and "HTTP 500" in first
    assert second == "back again"
    # Both user messages are kept, in order, and the second request sees the first.
    assert [r.content for r in rows if r.kind == "user"] == ["first", "second"]
    assert [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "user"] == [
        "first",
        "second",
    ]


async def test_malformed_tool_arguments_come_back_as_a_recoverable_error(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.tool_call("get_current_time", '{"timezone": '), fake.text("sorry"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
        rows = await main_history(h)
    assert "invalid_arguments" in tool_contents(fake_llm.requests[1])[-1]
    call = next(r for r in rows if r.kind == "tool_call")
    assert call.tool_input == '{"timezone": ' and call.tool_status == "error"
    assert h.sender.of("reply") == ["sorry"]


async def test_an_unknown_tool_is_refused_with_the_callable_list(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.tool_call("launch_rocket", {}), fake.text("I can't"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("launch")
    result = tool_contents(fake_llm.requests[1])[-1]
    assert "unknown_tool" in result and "load_tool_group" in result


def _group(name: str, handler: Any, timeout_s: float | None = None) -> ToolGroup:
    return ToolGroup(name, f"{name} tools", (Tool(f"{name}_do", "Do it", params(), handler, timeout_s),))


async def test_a_crashing_tool_becomes_an_error_result_not_a_crash(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async def boom(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise RuntimeError("disk on fire")

    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "boom"}),
        fake.tool_call("boom_do", {}),
        fake.text("oops"),
    )
    async with running_bridge(tmp_path, fake_llm, extra_groups=(_group("boom", boom),)) as h:
        await h.say("do it")
    assert "tool_failed" in tool_contents(fake_llm.requests[2])[-1]
    assert "disk on fire" in tool_contents(fake_llm.requests[2])[-1]
    assert h.sender.of("reply") == ["oops"]


async def test_a_tool_that_overruns_its_timeout_is_cut_off(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    never = asyncio.Event()

    async def hang(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        await never.wait()
        return ToolResult.success("unreachable")

    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "slow"}),
        fake.tool_call("slow_do", {}),
        fake.text("late"),
    )
    async with running_bridge(
        tmp_path, fake_llm, extra_groups=(_group("slow", hang),), tools={"timeouts": {"slow_do": 0.2}}
    ) as h:
        await h.say("do it")
    assert "did not finish within 0.2 s" in tool_contents(fake_llm.requests[2])[-1]


async def test_the_whole_run_has_a_deadline(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.delay(5, fake.text("too late")))
    async with running_bridge(tmp_path, fake_llm, agent={"run_timeout_s": 0.3}) as h:
        await h.say("slow question")
        run = await h.bridge.store.get_run(last_run_id(h.sender))
    assert "ran out of time" in h.sender.of("reply")[-1]
    assert run is not None and run.status == "timeout"


async def test_a_run_records_its_usage_and_status(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(
        fake.tool_call("get_current_time", {}), fake.text("ok", prompt_tokens=100, completion_tokens=7)
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
        run = await h.bridge.store.get_run(last_run_id(h.sender))
    assert run is not None
    assert (run.status, run.iterations, run.channel) == ("ok", 2, "test")
    assert run.prompt_tokens == 110 and run.completion_tokens == 12
    assert run.input_hash and len(run.input_hash) == 64


async def test_a_saved_memory_is_in_the_prompt_of_later_turns_even_after_clear(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("save_memory", {"content": "The user's cat is called Miso."}),
        fake.text("Noted."),
        fake.text("Miso!"),
        fake.text("hello stranger"),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("remember my cat is Miso")
        await h.say("/clear")
        await h.say("what is my cat called?")
        await h.say("hi", sender="stranger")
    assert "- The user's cat is called Miso." in fake_llm.requests[2]["messages"][0]["content"]
    # Memories belong to a conversation place: another user's chat never sees them.
    assert "Miso" not in fake_llm.requests[3]["messages"][0]["content"]


class _BrokenOnceProvider:
    """A provider that raises `error` on its first call, then is well again."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls = 0
        self.error = error or KeyError("choices")

    async def complete(self, messages: list[Any], tools: list[dict[str, Any]], sink: Any = None) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise self.error
        return Completion(content="fine now")

    async def aclose(self) -> None:
        return None


async def test_an_unexpected_error_is_reported_recorded_and_the_next_message_works(tmp_path: Path) -> None:
    bridge = Bridge(make_settings(tmp_path, "http://127.0.0.1:9/v1"), provider=_BrokenOnceProvider())
    sender = RecordingSender()
    bridge.add_sender(sender)
    async with bridge:
        h = Harness(bridge, sender, llm=None)  # type: ignore[arg-type]
        await h.say("first")
        run = await bridge.store.get_run(last_run_id(sender))
        await h.say("second")
    first, second = sender.of("reply")
    assert "Something went wrong" in first and "KeyError" in first
    assert run is not None and run.status == "error"
    assert second == "fine now"


async def test_a_bridge_error_that_escapes_a_run_shows_its_user_message_not_its_log_text(
    tmp_path: Path,
) -> None:
    error = StoreError("database is locked at /srv/bot/bridge.db", user_message="I couldn't save that.")
    bridge = Bridge(make_settings(tmp_path, "http://127.0.0.1:9/v1"), provider=_BrokenOnceProvider(error))
    sender = RecordingSender()
    bridge.add_sender(sender)
    async with bridge:
        h = Harness(bridge, sender, llm=None)  # type: ignore[arg-type]
        await h.say("first")
    (reply,) = sender.of("reply")
    assert "I couldn't save that." in reply and "/retry" in reply
    assert "/srv/bot" not in reply  # the operator's text (a path) stays in the log
