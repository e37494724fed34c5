"""MCP servers as tool groups, against real servers: listed from config, connected on load, called,
broken, slow, never started, changed, idle, and closed with no process left behind."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from bridge.agent.toolcalls import ToolCaller
from bridge.app.registry import build_registry
from bridge.llm.base import ToolCall
from bridge.mcp.group import McpToolSource
from bridge.tools.base import ToolResult
from tests.mcp.conftest import (
    HttpServer,
    McpBench,
    alive,
    calls,
    eventually,
    http_entry,
    mcp_registry,
    mcp_settings,
    starts,
    stdio_server,
)


async def call(bench: McpBench, tool: str, **arguments: Any) -> ToolResult:
    """One call as the runner makes it: checked against the loaded tools, in its time limit."""
    caller = ToolCaller(bench.settings, None, bench.registry)  # type: ignore[arg-type]
    return await caller.execute(bench.context, ToolCall("c1", tool, json.dumps(arguments)))


def hanging_server(tmp_path: Path, timeout_s: float) -> tuple[Path, dict[str, Any]]:
    """A server entry whose process starts, writes its pid to the returned file, and never answers."""
    pid_file = tmp_path / "hang.pid"
    script = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    entry = {
        "name": "hang",
        "description": "Starts, never answers.",
        "command": sys.executable,
        "args": ["-c", script],
        "timeout_s": timeout_s,
    }
    return pid_file, entry


async def load(bench: McpBench, group: str = "fake") -> ToolResult:
    return await call(bench, "load_tool_group", group_name=group)


async def test_a_configured_server_is_listed_without_starting_it(tmp_path: Path, mcp_log: Path) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log)) as bench:
        listing = bench.registry.group_listing()
        await asyncio.sleep(0.2)  # a process started by mistake would have logged by now
    assert "- fake: A test server: echo, add, picture, slow, crash and more." in listing
    assert starts(mcp_log) == []
    assert [t.name for t in bench.registry.active_tools({"fake"})][-1] == "save_memory"


async def test_loading_the_group_starts_the_server_once_and_its_tools_are_callable(
    tmp_path: Path, mcp_log: Path
) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log)) as bench:
        loaded = await load(bench)
        echoed = await call(bench, "echo", text="hi")
        added = await call(bench, "add", a=2, b=3)
        again = await load(bench)
        names = [t.name for t in bench.registry.active_tools({"fake"})]
    assert loaded.ok, loaded.content
    assert "Loaded 10 tools from group 'fake'" in loaded.content
    assert "- echo: Echo the text back." in loaded.content
    assert "already loaded" in again.content
    assert echoed.content == "echo: hi"
    assert json.loads(added.content) == {"sum": 5}
    assert "echo" in names and "add" in names
    assert len(starts(mcp_log)) == 1


async def test_a_tool_named_like_a_bridge_tool_is_prefixed_with_the_server_name(
    tmp_path: Path, mcp_log: Path
) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log)) as bench:
        await load(bench)
        names = {t.name for t in bench.registry.active_tools({"fake", "files"})}
        result = await call(bench, "fake__write_file", path="a.txt")
        # Bridge's own write_file is still the files group's.
        assert bench.registry.group_of("write_file") == "files"
    assert {"write_file", "fake__write_file"} <= names
    assert result.content == "mcp wrote a.txt"


async def test_images_are_described_and_tool_errors_name_the_server(tmp_path: Path, mcp_log: Path) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log)) as bench:
        await load(bench)
        picture = await call(bench, "picture")
        failed = await call(bench, "fail", reason="the disk is full")
        bad = await call(bench, "add", a="x", b=1)
    assert picture.ok and picture.content == "[image: image/png, 68 bytes]"
    assert not failed.ok and failed.code == "tool_error"
    assert "MCP server 'fake'" in failed.content and "the disk is full" in failed.content
    # Checked against the server's own schema before anything is sent.
    assert bad.code == "invalid_arguments" and "'a'" in bad.content


async def test_long_results_are_truncated_like_other_tools(tmp_path: Path, mcp_log: Path) -> None:
    from bridge.agent.history import truncate

    async with mcp_registry(tmp_path, stdio_server(mcp_log)) as bench:
        await load(bench)
        result = await call(bench, "echo", text="x" * 50_000)
    limit = bench.settings.agent.max_tool_result_chars
    assert len(truncate(result.content, limit)) <= limit + 200 < len(result.content)


async def test_a_server_killed_mid_call_is_an_error_naming_it_and_the_next_call_restarts_it(
    tmp_path: Path, mcp_log: Path
) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log)) as bench:
        await load(bench)
        first = int((await call(bench, "pid")).content)
        crashed = await call(bench, "crash")
        recovered = await call(bench, "echo", text="back")
        second = int((await call(bench, "pid")).content)
    assert not crashed.ok and crashed.code == "unavailable"
    assert "MCP server 'fake'" in crashed.content and "starts it again" in crashed.content
    assert recovered.content == "echo: back"
    assert first != second and starts(mcp_log) == [first, second]
    assert not alive(first)


async def test_a_slow_tool_past_its_timeout_is_an_error_and_the_connection_stays_usable(
    tmp_path: Path, mcp_log: Path
) -> None:
    server = stdio_server(mcp_log, timeout_s=5)
    async with mcp_registry(tmp_path, server, tools={"timeouts": {"slow": 0.5}}) as bench:
        await load(bench)
        slow = await call(bench, "slow", seconds=30)
        after = await call(bench, "echo", text="still here")
    assert slow.code == "timeout"
    assert slow.content == "Error [timeout]: slow on MCP server 'fake' did not finish within 0.5 s."
    assert after.content == "echo: still here"
    assert len(starts(mcp_log)) == 1


async def test_the_servers_timeout_s_bounds_its_calls(tmp_path: Path, mcp_log: Path) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log, timeout_s=2)) as bench:
        await load(bench)
        slow = await call(bench, "slow", seconds=30)
    assert slow.code == "timeout" and "within 2 s" in slow.content


async def test_a_server_that_never_starts_is_a_recoverable_error_with_back_off(tmp_path: Path) -> None:
    missing = {
        "name": "ghost",
        "description": "A server whose command does not exist.",
        "command": str(tmp_path / "no-such-server"),
    }
    async with mcp_registry(tmp_path, missing) as bench:
        first = await load(bench, "ghost")
        # The first retry is at once (a crash is often a one-off); the next waits.
        second = await load(bench, "ghost")
        third = await load(bench, "ghost")
        echo = await call(bench, "get_current_time")
    assert first.code == "unavailable"
    assert "MCP server 'ghost' could not be started" in first.content
    assert "no-such-server" in first.content
    assert "was not loaded" in first.content
    assert second.code == "unavailable" and "could not be started" in second.content
    assert third.code == "unavailable" and "tried again in" in third.content
    assert "ghost" not in bench.context.loaded_groups
    assert echo.ok


async def test_a_server_that_hangs_at_start_times_out_and_its_process_is_ended(
    tmp_path: Path, mcp_log: Path
) -> None:
    pid_file, hanging = hanging_server(tmp_path, timeout_s=1)
    async with mcp_registry(tmp_path, hanging) as bench:
        result = await load(bench, "hang")
        pid = int(await eventually(lambda: pid_file.exists() and pid_file.read_text(), "the pid"))
        await eventually(lambda: not alive(pid), "the hung server to be ended")
    assert result.code == "unavailable" and "did not answer in time" in result.content


async def test_a_changed_tool_list_is_offered_without_reloading(tmp_path: Path, mcp_log: Path) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log)) as bench:
        await load(bench)
        assert bench.registry.get("double") is None
        grown = await call(bench, "grow")
        await eventually(lambda: bench.registry.get("double"), "the new tool to be listed")
        doubled = await call(bench, "double", n=21)
        names = [t.name for t in bench.registry.active_tools({"fake"})]
    assert grown.content == "grown"
    assert doubled.content == "42"
    assert "double" in names
    assert len(starts(mcp_log)) == 1


async def test_a_server_gets_its_env_table_and_none_of_bridges_secrets(
    tmp_path: Path, mcp_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BRIDGE_TELEGRAM__TOKEN", "123:very-secret-token")
    monkeypatch.setenv("FOR_THE_SERVER", "passed on purpose")
    env = {"MCP_TEST_LOG": str(mcp_log), "API_KEY": "from-the-table", "PICKED": "${FOR_THE_SERVER}"}
    async with mcp_registry(tmp_path, stdio_server(mcp_log, env=env)) as bench:
        await load(bench)
        token = await call(bench, "env", name="BRIDGE_TELEGRAM__TOKEN")
        key = await call(bench, "env", name="API_KEY")
        picked = await call(bench, "env", name="PICKED")
        path = await call(bench, "env", name="PATH")
    assert token.content == "(unset)"
    assert key.content == "from-the-table"
    assert picked.content == "passed on purpose"
    assert path.content != "(unset)"


async def test_an_unused_server_is_closed_after_idle_close_s_and_reopened_by_the_next_call(
    tmp_path: Path, mcp_log: Path
) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log), mcp={"idle_close_s": 0.5}) as bench:
        await load(bench)
        first = int((await call(bench, "pid")).content)
        await eventually(lambda: not alive(first), "the idle server to be closed")
        # Its tools are still offered: the list is kept, only the process ended.
        assert bench.registry.get("echo") is not None
        echoed = await call(bench, "echo", text="again")
    assert echoed.content == "echo: again"
    assert len(starts(mcp_log)) == 2


async def test_closing_the_registry_ends_every_server_process(tmp_path: Path, tmp_path_factory: Any) -> None:
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    servers = [stdio_server(logs[0], name="one"), stdio_server(logs[1], name="two")]
    settings = mcp_settings(tmp_path, *servers)
    registry = build_registry(settings)
    bench = McpBench(settings, registry)
    await load(bench, "one")
    await load(bench, "two")
    pids = [starts(log)[0] for log in logs]
    assert all(alive(pid) for pid in pids)
    await registry.aclose()
    assert not any(alive(pid) for pid in pids)


async def test_tools_disabled_and_the_allowlist_leave_tools_out(tmp_path: Path, mcp_log: Path) -> None:
    server = stdio_server(mcp_log, tools=["echo", "add", "crash", "write_file"])
    async with mcp_registry(tmp_path, server, tools={"disabled": ["crash", "fake__write_file"]}) as bench:
        loaded = await load(bench)
        names = [t.name for t in bench.registry.tools_of(bench.registry.group("fake"))]  # type: ignore[arg-type]
        refused = await call(bench, "crash")
    assert names == ["echo", "add"]
    assert "Loaded 2 tools" in loaded.content
    assert refused.code == "unknown_tool"


async def test_a_disabled_server_is_not_listed(tmp_path: Path, mcp_log: Path) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log, disabled=True)) as bench:
        assert bench.registry.group("fake") is None
    async with mcp_registry(tmp_path, stdio_server(mcp_log), tools={"disabled": ["fake"]}) as bench:
        assert bench.registry.group("fake") is None


async def test_prepare_lists_a_restored_group_once_and_not_again(tmp_path: Path, mcp_log: Path) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log)) as bench:
        await bench.registry.prepare({"fake"})
        await bench.registry.prepare({"fake"})
        names = [t.name for t in bench.registry.active_tools({"fake"})]
    assert "echo" in names
    assert len(starts(mcp_log)) == 1


async def test_the_http_server_is_loaded_called_and_changed(tmp_path: Path, http_server: HttpServer) -> None:
    async with mcp_registry(tmp_path, http_entry(http_server)) as bench:
        listing = bench.registry.group_listing()
        assert calls(http_server.log) == []
        loaded = await load(bench, "remote")
        echoed = await call(bench, "echo", text="over http")
        await call(bench, "grow")
        await eventually(lambda: bench.registry.get("double"), "the new tool over HTTP")
        doubled = await call(bench, "double", n=4)
        group = bench.registry.group("remote")
        assert group is not None and isinstance(group.source, McpToolSource)
        source = group.source
    assert "- remote: A test server over HTTP." in listing
    assert loaded.ok and echoed.content == "echo: over http" and doubled.content == "8"
    assert source.connection.opens == 1


async def test_an_http_server_that_went_away_is_an_error_then_recovers_when_back(
    tmp_path: Path, http_server: HttpServer
) -> None:
    async with mcp_registry(tmp_path, http_entry(http_server, timeout_s=3)) as bench:
        await load(bench, "remote")
        await http_server.kill()
        gone = await call(bench, "echo", text="anyone?")
        await http_server.start()
        back = await call(bench, "echo", text="back")
    assert not gone.ok and "MCP server 'remote'" in gone.content
    assert back.content == "echo: back"


async def test_two_runs_loading_one_server_at_once_start_one_process(tmp_path: Path, mcp_log: Path) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log)) as bench:
        loads = await asyncio.gather(*(load(bench) for _ in range(5)))
        echoes = await asyncio.gather(*(call(bench, "echo", text=str(i)) for i in range(5)))
    assert all(result.ok for result in loads)
    assert [e.content for e in echoes] == [f"echo: {i}" for i in range(5)]
    assert len(starts(mcp_log)) == 1


async def test_a_call_longer_than_idle_close_s_is_not_cut_by_the_idle_close(
    tmp_path: Path, mcp_log: Path
) -> None:
    async with mcp_registry(tmp_path, stdio_server(mcp_log), mcp={"idle_close_s": 0.3}) as bench:
        await load(bench)
        slow = await call(bench, "slow", seconds=1.5)
    assert slow.content == "slept 1.5"
    assert len(starts(mcp_log)) == 1


async def test_what_a_stdio_server_writes_to_stderr_goes_into_bridges_log(
    tmp_path: Path, mcp_log: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.mcp.stderr")
    async with mcp_registry(tmp_path, stdio_server(mcp_log)) as bench:
        await load(bench)
        await call(bench, "fail", reason="a reason only stderr tells")

        def logged() -> bool:
            # Each stderr line is a log record; where `rich` is installed the server's logging wraps
            # its message over several lines, so the lines are read together.
            lines = [
                r.getMessage().removeprefix("MCP server fake: ")
                for r in caplog.records
                if r.name == "bridge.mcp.stderr"
            ]
            return "a reason only stderr tells" in " ".join(" ".join(lines).split())

        await eventually(logged, "the server's stderr line in the log")
    line = next(r.getMessage() for r in caplog.records if r.name == "bridge.mcp.stderr")
    assert line.startswith("MCP server fake: ")


async def test_a_load_stopped_while_the_server_starts_leaves_no_connection_behind(tmp_path: Path) -> None:
    pid_file, hanging = hanging_server(tmp_path, timeout_s=60)
    settings = mcp_settings(tmp_path, hanging, tools={"timeouts": {"load_tool_group": 0.5}})
    bench = McpBench(settings, build_registry(settings))
    result = await load(bench, "hang")
    pid = int(await eventually(lambda: pid_file.exists() and pid_file.read_text(), "the pid"))
    # Closing does not wait out the server's 60 s to connect: the stopped load ended it.
    await asyncio.wait_for(bench.registry.aclose(), 8)
    assert result.code == "timeout"
    await eventually(lambda: not alive(pid), "the half-started server to be ended", within=8)


async def test_a_damaged_kept_listing_is_ignored_and_the_server_listed_anew(
    tmp_path: Path, mcp_log: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kept = tmp_path / "mcp-tools" / "fake.json"
    kept.parent.mkdir()
    kept.write_text('{"fingerprint": ', encoding="utf-8")
    async with mcp_registry(tmp_path, stdio_server(mcp_log)) as bench:
        await bench.registry.prepare({"fake"})
        names = [t.name for t in bench.registry.active_tools({"fake"})]
    assert "echo" in names
    assert len(starts(mcp_log)) == 1
    assert "cached tool list" in caplog.text
    # Listed anew, and kept again for the next start.
    assert '"name": "echo"' in kept.read_text(encoding="utf-8")


async def test_lines_that_are_not_mcp_on_stdout_do_not_break_the_connection(
    tmp_path: Path, mcp_log: Path
) -> None:
    # A banner on stdout before the server speaks MCP, as many servers print.
    banner = (
        "import os, sys; os.write(1, b'Starting the server...\\nnot json either\\n'); "
        "os.execv(sys.executable, [sys.executable, '-m', 'devkit.fakes.mcp_server'])"
    )
    async with mcp_registry(tmp_path, stdio_server(mcp_log, args=["-c", banner])) as bench:
        loaded = await load(bench)
        first = await call(bench, "echo", text="after the banner")
        second = await call(bench, "echo", text="again")
    assert loaded.ok, loaded.content
    assert first.content == "echo: after the banner" and second.content == "echo: again"
    assert len(starts(mcp_log)) == 1
