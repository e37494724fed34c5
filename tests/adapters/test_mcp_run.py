"""MCP servers through a real `bridge run` on the fake Telegram and through `bridge chat`: a stdio and
an HTTP server loaded, called in a later turn without a new process, and no child process left
behind after SIGTERM."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import kill9, start_bridge, telegram_run_config
from tests.adapters.conftest import OWNER
from tests.adapters.test_run import reap, sigterm
from tests.mcp.conftest import ROOT, HttpServer, alive, eventually, starts
from tests.mcp.conftest import http_server as http_server  # the fixture, for this module too
from tests.test_cli import bridge


def servers_toml(log: Path, http: HttpServer | None = None) -> str:
    text = (
        "[[mcp.servers]]\n"
        'name = "fake"\n'
        'description = "A test server: echo, add and more."\n'
        f'command = "{sys.executable}"\n'
        'args = ["-m", "devkit.fakes.mcp_server"]\n'
        f'cwd = "{ROOT}"\n'
        f'env = {{ MCP_TEST_LOG = "{log}" }}\n'
    )
    if http is not None:
        text += f'[[mcp.servers]]\nname = "remote"\ndescription = "Over HTTP."\nurl = "{http.url}"\n'
    return text


def replies(tg: FakeTelegram) -> list[str]:
    """The answers in the owner's DM; tool activity goes out as messages of its own."""
    return [m["text"] for m in tg.messages_in(OWNER) if not m["text"].startswith("⚙")]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM")
async def test_bridge_run_loads_mcp_servers_and_leaves_no_child_process_after_sigterm(
    tmp_path: Path, tg: FakeTelegram, fake_llm: FakeOpenAI, http_server: HttpServer
) -> None:
    log = tmp_path / "mcp.log"
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "fake"}),
        fake.tool_call("load_tool_group", {"group_name": "remote"}),
        fake.tool_call("echo", {"text": "local"}),
        fake.text("loaded both"),
        fake.tool_call("pid", {}),
        fake.tool_call("remote__echo", {"text": "far"}),
        fake.text("called both"),
    )
    config = telegram_run_config(
        tmp_path, OWNER, tg.token, tg.api_base, fake_llm.base_url, servers_toml(log, http_server)
    )
    process = await start_bridge(tmp_path, "run", "--config", str(config))
    try:
        await tg.wait_for(lambda: tg.open_polls >= 1, timeout=30)
        assert starts(log) == []
        tg.dm(OWNER, "load the servers")
        await tg.wait_for(lambda: len(replies(tg)) >= 1, timeout=30)
        tg.dm(OWNER, "call them")
        await tg.wait_for(lambda: len(replies(tg)) >= 2, timeout=30)
        pids = starts(log)
        assert len(pids) == 1 and alive(pids[0])
        stderr, _ = await sigterm(process)
    finally:
        await reap(process)
    assert process.returncode == 0, stderr
    assert replies(tg) == ["loaded both", "called both"]
    results = [str(m["content"]) for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    # Both servers named `echo`: the one loaded second answers to the prefixed name.
    assert results[-2:] == [str(pids[0]), "echo: far"]
    # Ended by Bridge's stop, before the process exited: not left to notice its stdin closing.
    assert not alive(pids[0])


async def test_bridge_chat_uses_an_mcp_server_across_turns_and_clear_resets_it(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    log = tmp_path / "mcp.log"
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "fake"}),
        fake.tool_call("echo", {"text": "hello"}),
        fake.text("it said hello"),
        fake.tool_call("add", {"a": 1, "b": 2}),
        fake.text("3"),
        fake.text("fresh"),
    )
    config = tmp_path / "config.toml"
    config.write_text(
        f'[llm]\nbase_url = "{fake_llm.base_url}"\nmodel = "fake"\nmax_retries = 0\n'
        f'[storage]\npath = "{tmp_path / "bridge.db"}"\n' + servers_toml(log),
        encoding="utf-8",
    )
    done = await bridge(
        "chat", "--config", str(config), cwd=tmp_path, lines=("echo hello", "add 1 and 2", "/clear", "hi")
    )
    assert done.code == 0, done.output
    replies = [line for line in done.stdout.splitlines() if line.startswith("bridge ›")]
    assert [r.removeprefix("bridge ›").strip() for r in replies] == ["it said hello", "3", "fresh"]
    assert any("echo" in line and "✓" in line for line in done.stdout.splitlines() if "⚙" in line)
    turn2 = next(
        i for i, r in enumerate(fake_llm.requests) if r["messages"][-1].get("content") == "add 1 and 2"
    )
    assert "add" in fake_llm.tool_names(turn2)
    after_clear = len(fake_llm.requests) - 1
    assert "add" not in fake_llm.tool_names(after_clear)
    assert len(starts(log)) == 1
    assert not alive(starts(log)[0])


@pytest.mark.skipif(sys.platform == "win32", reason="kill -9")
async def test_after_kill_9_of_bridge_run_its_stdio_server_exits_on_its_own(
    tmp_path: Path, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    log = tmp_path / "mcp.log"
    fake_llm.push(fake.tool_call("load_tool_group", {"group_name": "fake"}), fake.text("loaded"))
    config = telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, fake_llm.base_url, servers_toml(log))
    process = await start_bridge(tmp_path, "run", "--config", str(config))
    try:
        tg.dm(OWNER, "load it")
        await tg.wait_for(lambda: len(replies(tg)) >= 1, timeout=30)
        pid = starts(log)[0]
        await kill9(process)
    finally:
        await reap(process)
    # Nobody ended it, but its stdin closed with Bridge: the server notices and exits.
    await eventually(lambda: not alive(pid), "the orphaned stdio server to exit", within=10)
