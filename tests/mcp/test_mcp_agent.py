"""MCP server groups in whole turns: the dispatcher, the runner, the fake model over HTTP and a real
stdio server; a loaded server stays loaded across turns and restarts without a process per turn."""

from __future__ import annotations

import itertools
from pathlib import Path

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import CORE_TOOLS, running_bridge
from tests.mcp.conftest import alive, starts, stdio_server


def tool_results(body: dict) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


async def test_a_loaded_server_stays_loaded_in_the_next_turn_without_a_new_process(
    tmp_path: Path, fake_llm: FakeOpenAI, mcp_log: Path
) -> None:
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "fake"}),
        fake.tool_call("echo", {"text": "one"}),
        fake.text("first done"),
        fake.tool_call("echo", {"text": "two"}),
        fake.text("second done"),
    )
    async with running_bridge(tmp_path, fake_llm, mcp={"servers": [stdio_server(mcp_log)]}) as h:
        assert starts(mcp_log) == []
        await h.say("echo one")
        await h.say("echo two")
        second_turn = h.first_request_of_turn("echo two")
        pid = starts(mcp_log)[0]
    prompt = fake_llm.requests[0]["messages"][0]["content"]
    assert "- fake: A test server: echo, add, picture, slow, crash and more." in prompt
    assert fake_llm.tool_names(0) == CORE_TOOLS
    assert "echo" in fake_llm.tool_names(1)
    assert tool_results(fake_llm.requests[2])[-1] == "echo: one"
    # The next turn offers the server's tools at once, restored from history.
    assert "echo" in fake_llm.tool_names(second_turn)
    assert "- fake (loaded):" in fake_llm.requests[second_turn]["messages"][0]["content"]
    assert tool_results(fake_llm.requests[second_turn + 1])[-1] == "echo: two"
    assert h.sender.of("reply") == ["first done", "second done"]
    assert len(starts(mcp_log)) == 1
    # Bridge's stop ended the server's process.
    assert not alive(pid)


async def test_after_a_restart_the_restored_server_is_started_once_and_its_tool_answers(
    tmp_path: Path, fake_llm: FakeOpenAI, mcp_log: Path
) -> None:
    servers = {"servers": [stdio_server(mcp_log)]}
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "fake"}),
        fake.text("loaded"),
    )
    async with running_bridge(tmp_path, fake_llm, mcp=servers) as h:
        await h.say("load it")
    fake_llm.push(
        fake.tool_call("add", {"a": 20, "b": 22}),
        fake.text("42"),
        fake.tool_call("echo", {"text": "x"}),
        fake.text("x"),
    )
    async with running_bridge(tmp_path, fake_llm, mcp=servers) as h:
        h._msg_ids = itertools.count(100)
        await h.say("add them")
        await h.say("echo x")
        turn = h.first_request_of_turn("add them")
    assert "add" in fake_llm.tool_names(turn)
    assert tool_results(fake_llm.requests[turn + 1])[-1] == '{\n  "sum": 42\n}'
    assert h.sender.of("reply") == ["42", "x"]
    assert len(starts(mcp_log)) == 2


async def test_a_server_that_cannot_start_leaves_the_turn_answered_and_the_session_usable(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    ghost = {"name": "ghost", "description": "Never starts.", "command": str(tmp_path / "missing")}
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "ghost"}),
        fake.text("The ghost server is down, sorry."),
        fake.text("hello again"),
    )
    async with running_bridge(tmp_path, fake_llm, mcp={"servers": [ghost]}) as h:
        await h.say("use ghost")
        await h.say("hi")
    assert "MCP server 'ghost' could not be started" in tool_results(fake_llm.requests[1])[-1]
    assert h.sender.of("reply") == ["The ghost server is down, sorry.", "hello again"]


async def test_after_a_restart_a_turn_that_calls_none_of_its_tools_starts_no_server(
    tmp_path: Path, fake_llm: FakeOpenAI, mcp_log: Path
) -> None:
    servers = {"servers": [stdio_server(mcp_log)]}
    fake_llm.push(fake.tool_call("load_tool_group", {"group_name": "fake"}), fake.text("loaded"))
    async with running_bridge(tmp_path, fake_llm, mcp=servers) as h:
        await h.say("load it")
    assert len(starts(mcp_log)) == 1
    fake_llm.push(fake.text("just chatting"), fake.tool_call("echo", {"text": "now"}), fake.text("now"))
    async with running_bridge(tmp_path, fake_llm, mcp=servers) as h:
        h._msg_ids = itertools.count(100)
        await h.say("hello")
        chatting = h.first_request_of_turn("hello")
        # Offered from the listing the first process kept, with no process started for it.
        assert "echo" in fake_llm.tool_names(chatting)
        assert len(starts(mcp_log)) == 1
        await h.say("echo now")
        assert h.sender.of("reply") == ["just chatting", "now"]
    assert len(starts(mcp_log)) == 2


async def test_a_kept_listing_of_another_command_is_not_used(
    tmp_path: Path, fake_llm: FakeOpenAI, mcp_log: Path
) -> None:
    fake_llm.push(fake.tool_call("load_tool_group", {"group_name": "fake"}), fake.text("loaded"))
    async with running_bridge(tmp_path, fake_llm, mcp={"servers": [stdio_server(mcp_log)]}) as h:
        await h.say("load it")
    assert (tmp_path / "mcp-tools" / "fake.json").is_file()
    changed = stdio_server(mcp_log, args=["-m", "devkit.fakes.mcp_server", "--tools", "1"])
    fake_llm.push(fake.text("hi"))
    async with running_bridge(tmp_path, fake_llm, mcp={"servers": [changed]}) as h:
        h._msg_ids = itertools.count(100)
        await h.say("hello")
        turn = h.first_request_of_turn("hello")
    # Another command: its tools are listed anew (a process started), and the new tool is offered.
    assert "tool_00" in fake_llm.tool_names(turn)
    assert len(starts(mcp_log)) == 2
