"""`bridge mcp list`, and the worked example of docs/mcp.md: the notes server in docs/examples."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bridge.agent.toolcalls import ToolCaller
from bridge.llm.base import ToolCall
from tests.mcp.conftest import ROOT, mcp_registry
from tests.test_cli import assert_no_traceback, bridge

NOTES_SERVER = ROOT / "docs" / "examples" / "notes_server.py"


def notes_entry(folder: Path) -> str:
    return (
        '[[mcp.servers]]\nname = "notes"\ndescription = "Read, write and search the team\'s notes."\n'
        f'command = "{sys.executable}"\nargs = ["{NOTES_SERVER}", "{folder}"]\n'
    )


async def test_mcp_list_prints_each_servers_tools_with_their_schema_tokens(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(notes_entry(tmp_path / "notes"), encoding="utf-8")
    done = await bridge("mcp", "list", "--config", str(config), cwd=tmp_path)
    assert done.code == 0, done.output
    assert_no_traceback(done)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("notes (stdio: ") and lines[0].endswith(" schema tokens")
    assert ": 4 tools, " in lines[0]
    tools = [line.split()[0] for line in lines[1:5]]
    assert tools == ["list_notes", "read_note", "write_note", "search_notes"]
    assert all(" tok  " in line for line in lines[1:5])


async def test_mcp_list_names_a_server_that_does_not_start_and_exits_non_zero(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        notes_entry(tmp_path / "notes")
        + '[[mcp.servers]]\nname = "ghost"\ndescription = "Gone."\ncommand = "/no/such/server"\n'
        + '[[mcp.servers]]\nname = "off"\ndescription = "Off."\nurl = "http://127.0.0.1:9/mcp"\n'
        + "disabled = true\n",
        encoding="utf-8",
    )
    done = await bridge("mcp", "list", "--config", str(config), cwd=tmp_path)
    assert done.code == 1, done.output
    assert "ghost (stdio: /no/such/server): MCP server 'ghost' could not be started" in done.stdout
    assert "off (http://127.0.0.1:9/mcp): disabled" in done.stdout
    assert "notes (stdio: " in done.stdout


async def test_mcp_list_without_servers_says_where_to_add_them(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("", encoding="utf-8")
    done = await bridge("mcp", "list", "--config", str(config), cwd=tmp_path)
    assert done.code == 0 and "[[mcp.servers]]" in done.stdout


async def test_the_readme_notes_server_writes_reads_and_searches_and_stays_in_its_folder(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "notes"
    entry = {
        "name": "notes",
        "description": "Notes.",
        "command": sys.executable,
        "args": [str(NOTES_SERVER), str(folder)],
    }
    async with mcp_registry(tmp_path, entry) as bench:
        caller = ToolCaller(bench.settings, None, bench.registry)  # type: ignore[arg-type]

        async def call(tool: str, **args: object) -> str:
            result = await caller.execute(bench.context, ToolCall("c", tool, json.dumps(args)))
            return result.content

        assert "Loaded 4 tools" in await call("load_tool_group", group_name="notes")
        assert await call("write_note", name="shopping", text="Buy milk") == "saved shopping"
        assert await call("read_note", name="shopping") == "Buy milk"
        assert "shopping" in await call("search_notes", query="MILK")
        escape = await call("read_note", name="../../etc/passwd")
    assert "outside the notes folder" in escape and "MCP server 'notes'" in escape
    assert (folder / "shopping.md").read_text() == "Buy milk"
