"""tool_mode = "text" end to end: fenced JSON replies over real HTTP become tool runs, nothing else does."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import pdf_group, running_bridge

TEXT = {"tool_mode": "text"}


def fenced(name: str, arguments: dict[str, Any], *, key: str = "tool_name", prose: str = "") -> fake.Reply:
    payload = json.dumps({key: name, "arguments": arguments})
    return fake.text(f"{prose}\n```json\n{payload}\n```".strip())


def system_prompt(body: dict[str, Any]) -> str:
    return body["messages"][0]["content"]


async def test_a_fenced_call_runs_the_tool_and_its_result_goes_back_as_a_tool_message(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fenced("get_current_time", {}, key="name", prose="Checking."), fake.text("It is noon."))
    async with running_bridge(tmp_path, fake_llm, llm=TEXT) as h:
        await h.say("what time is it? use your tool")
    first, second = fake_llm.requests
    # Tools are described in the prompt, never sent as native schemas.
    assert "tools" not in first and "tools" not in second
    assert "## Tools" in system_prompt(first)
    assert "- get_current_time(" in system_prompt(first)
    assistant, result = second["messages"][-2:]
    assert assistant == {
        "role": "assistant",
        "content": 'Checking.\n\n```tool\n{"tool_name": "get_current_time", "arguments": {}}\n```',
    }
    assert result["role"] == "tool"
    assert result["content"].startswith("[tool.result of get_current_time]\n")
    assert h.sender.of("reply") == ["It is noon."]
    assert any("get_current_time" in text for text in h.sender.of("activity"))


async def test_a_group_loaded_in_text_mode_is_usable_at_once_and_on_the_next_turn(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fenced("load_tool_group", {"group_name": "pdf"}),
        fenced("pdf_info", {"path": "a.pdf"}),
        fake.text("3 pages"),
        fenced("pdf_info", {"path": "b.pdf"}),
        fake.text("also 3"),
    )
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),), llm=TEXT) as h:
        await h.say("pages of a.pdf?")
        await h.say("and b.pdf?")
    assert "- pdf_info(" not in system_prompt(fake_llm.requests[0])
    assert "- pdf_info(" in system_prompt(fake_llm.requests[1])
    # Turn two starts with the group restored from history.
    assert "- pdf_info(" in system_prompt(fake_llm.requests[3])
    assert fake_llm.requests[2]["messages"][-1]["content"].endswith('{"path": "a.pdf", "pages": 3}')
    assert fake_llm.requests[4]["messages"][-1]["content"].endswith('{"path": "b.pdf", "pages": 3}')
    assert h.sender.of("reply") == ["3 pages", "also 3"]


async def test_a_tool_of_an_unloaded_group_is_refused_with_a_hint_to_load_it(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fenced("pdf_info", {"path": "a.pdf"}), fake.text("ok"))
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),), llm=TEXT) as h:
        await h.say("pages?")
    result = fake_llm.requests[1]["messages"][-1]["content"]
    assert "group 'pdf', which is not loaded yet" in result
    assert h.sender.of("reply") == ["ok"]


async def test_prose_about_ls_and_an_echoed_result_reach_the_user_as_text_and_run_nothing(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    echo = '```json\n{"tool_name": "tool.result", "arguments": {"time": "12:00"}}\n```'
    fake_llm.push(
        fake.text("Run `ls` in a shell:\n```sh\nls -la\n```"),
        fake.text(echo),
        fenced("no_such_tool", {}),
    )
    async with running_bridge(tmp_path, fake_llm, llm=TEXT) as h:
        await h.say("how do I list files?")
        await h.say("repeat the result")
        await h.say("call something")
    assert len(fake_llm.requests) == 3
    assert h.sender.of("activity") == []
    assert h.sender.of("reply")[:2] == ["Run `ls` in a shell:\n```sh\nls -la\n```", echo]
    assert "no_such_tool" in h.sender.of("reply")[2]


async def test_results_go_back_as_user_messages_when_configured(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fenced("get_current_time", {}), fake.text("noon"))
    async with running_bridge(tmp_path, fake_llm, llm={**TEXT, "text_result_role": "user"}) as h:
        await h.say("time?")
    roles = [m["role"] for m in fake_llm.requests[1]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert h.sender.of("reply") == ["noon"]


async def test_a_session_started_in_native_mode_continues_in_text_mode(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("noon"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
    fake_llm.push(fake.text("still noon"))
    async with running_bridge(tmp_path, fake_llm, llm=TEXT) as h:
        h._msg_ids = itertools.count(100)  # a new platform message, not a redelivery of the first
        await h.say("and now?")
    messages = fake_llm.requests[2]["messages"]
    assert all("tool_calls" not in m for m in messages)
    assert '```tool\n{"tool_name": "get_current_time", "arguments": {}}\n```' in messages[2]["content"]
    assert h.sender.of("reply") == ["still noon"]


async def test_in_native_mode_a_call_the_server_left_in_the_text_still_runs(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # What the small Qwen does now and then when llama-server's template parser misses its call.
    fake_llm.push(fake.text('{"name": "get_current_time", "arguments": {}}'), fake.text("It is noon."))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
    assert fake_llm.requests[1]["messages"][-1]["role"] == "tool"
    assert fake_llm.requests[1]["messages"][-2]["tool_calls"][0]["function"]["name"] == "get_current_time"
    assert h.sender.of("reply") == ["It is noon."]


async def test_a_bare_call_object_is_not_run_but_the_model_is_told_once_how_to_write_it(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    bare = '{"tool_name": "get_current_time", "arguments": {}}'
    fake_llm.push(
        fake.text(bare),
        fenced("get_current_time", {}),
        fake.text("It is noon."),
        fake.text(bare),
        fake.text(bare),
        fake.text("Still noon."),
    )
    async with running_bridge(tmp_path, fake_llm, llm=TEXT) as h:
        await h.say("time?")
        await h.say("and again?")
        session = await h.bridge.store.active_session("main")
        assert session is not None
        rows = await h.bridge.store.history(session.id, 50)
    correction = fake_llm.requests[1]["messages"][-2:]
    assert correction[0] == {"role": "assistant", "content": bare}
    assert correction[1]["role"] == "user" and "```json" in correction[1]["content"]
    assert h.sender.of("reply")[0] == "It is noon."
    # Told once per run: a second bare object is plainly meant as a call, and runs; it is never the answer.
    assert fake_llm.requests[5]["messages"][-1]["content"].startswith("[tool.result of get_current_time]")
    assert h.sender.of("reply")[1] == "Still noon."
    assert len(fake_llm.requests) == 6
    # The correction lived only in its run: history holds the question, the call, the answer.
    assert [r.kind for r in rows][:4] == ["user", "tool_call", "tool_result", "assistant"]
    assert not any("that was not run" in r.content for r in rows)
