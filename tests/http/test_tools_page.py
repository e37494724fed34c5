"""The Tools page and /api/tools against a real Bridge with real MCP server processes: a server is
`not started` until a turn loads its group, then `connected` with its tools and their token cost; one
whose command exits at once is `failing` with its last error and its next try; the servers' secrets
never show."""

from __future__ import annotations

import html
import sys
from pathlib import Path
from typing import Any

import httpx

from bridge.mcp.group import McpToolSource
from devkit.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.http.conftest import admin_bridge, client_of
from tests.mcp.conftest import starts, stdio_server
from tests.pg import free_port
from tests.waiting import eventually

SECRET = "s3cret-env-value-4242"
HEADER_SECRET = "header-secret-9a8b7c"
QUERY_SECRET = "query-secret-1q2w3e"


def working(log: Path) -> dict[str, Any]:
    return stdio_server(log, env={"MCP_TEST_LOG": str(log), "FAKE_API_TOKEN": SECRET})


def exits_at_once() -> dict[str, Any]:
    return {
        "name": "broken",
        "description": "A server whose process exits before it answers.",
        "command": sys.executable,
        "args": ["-c", "import sys; sys.exit(3)"],
        "env": {"BROKEN_TOKEN": SECRET},
    }


def unreachable() -> dict[str, Any]:
    return {
        "name": "remote",
        "description": "An HTTP server nobody listens for.",
        "url": f"http://127.0.0.1:{free_port()}/mcp?key={QUERY_SECRET}",
        "headers": {"Authorization": f"Bearer {HEADER_SECRET}"},
        "timeout_s": 5,
    }


async def tools_of(client: httpx.AsyncClient) -> dict[str, Any]:
    answer = await client.get("/api/tools")
    assert answer.status_code == 200, answer.text
    assert_no_secret(answer.text)
    body: dict[str, Any] = answer.json()
    return body


async def page_of(client: httpx.AsyncClient) -> str:
    answer = await client.get("/tools", headers={"Accept": "text/html"})
    assert answer.status_code == 200, answer.text
    assert_no_secret(answer.text)
    return html.unescape(answer.text)


def assert_no_secret(shown: str) -> None:
    for secret in (SECRET, HEADER_SECRET, QUERY_SECRET):
        assert secret not in shown


def server(body: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in body["mcp"] if s["name"] == name)
    return found


def group(body: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(g for g in body["groups"] if g["name"] == name)
    return found


async def test_a_server_is_not_started_until_a_turn_loads_it_then_connected_with_its_tools_and_their_cost(
    tmp_path: Path,
) -> None:
    mcp_log = tmp_path / "mcp.log"
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, mcp={"servers": [working(mcp_log)]}) as (harness, _, base),
        client_of(base) as client,
    ):
        before = server(await tools_of(client), "fake")
        assert before["state"]["phase"] == "not started"
        assert before["tools"] == [] and before["tools_from"] is None
        assert before["target"] == f"{sys.executable} -m devkit.fakes.mcp_server"
        assert "not started" in await page_of(client)
        # Looking starts nothing.
        assert starts(mcp_log) == []

        llm.push(tool_call("load_tool_group", {"group_name": "fake"}), text("loaded"))
        await harness.say("load the fake server")

        body = await tools_of(client)
        after = server(body, "fake")
        assert after["state"]["phase"] == "connected"
        assert after["state"]["since"] is not None
        names = [t["name"] for t in after["tools"]]
        assert "echo" in names and after["state"]["tools"] >= len(names)
        assert after["tools_from"] == "server"
        assert all(t["tokens"] > 0 for t in after["tools"])
        assert after["tokens"] >= max(t["tokens"] for t in after["tools"])
        listed = group(body, "fake")
        assert listed["kind"] == "MCP server" and listed["sent"] == "on demand"
        assert listed["tokens"] == after["tokens"] and [t["name"] for t in listed["tools"]] == names
        shown = await page_of(client)
        assert 'data-state="connected"' in shown
        assert "Echo the text back." in shown
        assert len(starts(mcp_log)) == 1

    # After a restart the server is not started again, and its tools are shown as the last process
    # listed them, without starting it.
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, mcp={"servers": [working(mcp_log)]}) as (_, _, base),
        client_of(base) as client,
    ):
        again = server(await tools_of(client), "fake")
        assert again["state"]["phase"] == "not started"
        assert again["tools_from"] == "kept"
        assert [t["name"] for t in again["tools"]] == names
        assert "as an earlier process listed them" in await page_of(client)
        assert len(starts(mcp_log)) == 1


async def test_a_server_whose_command_exits_at_once_is_failing_with_its_last_error_and_next_try(
    tmp_path: Path,
) -> None:
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, mcp={"servers": [exits_at_once()]}) as (harness, _, base),
        client_of(base) as client,
    ):
        for turn in ("load it", "load it again"):
            llm.push(tool_call("load_tool_group", {"group_name": "broken"}), text("it is broken"))
            await harness.say(turn)

        body = await tools_of(client)
        state = server(body, "broken")["state"]
        assert state["phase"] == "failing"
        assert state["reason"] == "it exited or closed the connection before answering"
        # The first retry is at once; after the second failure in a row the next waits 2 s.
        assert state["attempts"] == 2
        assert state["retry_at"] > state["since"]
        assert group(body, "broken")["problem"] == state["reason"]
        shown = await page_of(client)
        assert 'data-state="failing"' in shown
        assert "it exited or closed the connection before answering" in shown
        assert "2 in a row" in shown
        assert "next try" in shown and "Connect now" in shown

        # Connect now tries at once, whatever the wait, and says why it failed.
        answer = await client.post("/api/tools/mcp/broken/connect")
        assert answer.status_code == 502
        assert "could not be started" in answer.json()["detail"]
        assert server(await tools_of(client), "broken")["state"]["attempts"] == 3
        assert (await client.post("/api/tools/mcp/nobody/connect")).status_code == 404


async def test_connect_now_starts_a_server_and_an_unreachable_one_fails_without_showing_its_secrets(
    tmp_path: Path,
) -> None:
    mcp_log = tmp_path / "mcp.log"
    servers = {"servers": [working(mcp_log), unreachable()]}
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, mcp=servers) as (_, _, base),
        client_of(base) as client,
    ):
        answer = await client.post("/api/tools/mcp/fake/connect")
        assert answer.status_code == 200, answer.text
        assert "connected" in answer.json()["said"]
        assert server(await tools_of(client), "fake")["state"]["phase"] == "connected"

        refused = await client.post("/api/tools/mcp/remote/connect")
        assert refused.status_code == 502
        assert_no_secret(refused.text)
        remote = server(await tools_of(client), "remote")
        assert remote["state"]["phase"] == "failing" and remote["state"]["reason"]
        # Where it runs, without its credentials or query.
        assert remote["target"].endswith("/mcp?…") and remote["transport"] == "http"
        await page_of(client)


async def test_groups_show_how_they_are_sent_and_what_they_cost_with_what_is_off_and_the_skills(
    tmp_path: Path,
) -> None:
    skill = tmp_path / "skills" / "pdf-forms"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: pdf-forms\ndescription: Fill in PDF forms.\n---\nSteps.\n")
    (skill / "fields.md").write_text("fields")
    async with (
        FakeOpenAI() as llm,
        admin_bridge(
            tmp_path, llm, skills={"paths": [str(tmp_path / "skills")]}, tools={"disabled": ["sessions"]}
        ) as (_, _, base),
        client_of(base) as client,
    ):
        body = await tools_of(client)
        core = {t["name"]: t for t in body["core"]["tools"]}
        assert "load_tool_group" in core and "load_skill" in core
        assert body["core"]["sent"] == "always" and body["core"]["tokens"] > core["load_tool_group"]["tokens"]
        assert body["listing_tokens"] > 0
        web = group(body, "web")
        assert web["kind"] == "built-in" and web["sent"] == "on demand"
        assert [t["name"] for t in web["tools"]] == ["webfetch"] and web["tokens"] > 0
        assert "sessions" not in {g["name"] for g in body["groups"]}
        off = {item["name"]: item["why"] for item in body["left_out"]}
        assert "[tools.exec] enabled" in off["exec"]
        assert "[tools.browser] enabled" in off["browser"]
        assert "[tools.web_search] provider" in off["web_search"]
        assert off["sessions"] == "named in [tools] disabled"
        assert body["skills"] == [
            {
                "name": "pdf-forms",
                "description": "Fill in PDF forms.",
                "folder": str(skill.resolve()),
                "files": 1,
            }
        ]
        assert body["mcp"] == []
        shown = await page_of(client)
        assert 'data-live="tools"' in shown
        for part in ("pdf-forms", "Fill in PDF forms.", "webfetch", "No MCP servers are configured"):
            assert part in shown


async def test_a_server_closed_when_idle_is_stopped_with_why_until_its_next_call(tmp_path: Path) -> None:
    mcp_log = tmp_path / "mcp.log"
    servers = {"servers": [working(mcp_log)], "idle_close_s": 0.3}
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, mcp=servers) as (harness, _, base),
        client_of(base) as client,
    ):
        llm.push(tool_call("load_tool_group", {"group_name": "fake"}), text("loaded"))
        await harness.say("load it")
        source = harness.bridge.registry.group("fake").source  # type: ignore[union-attr]
        assert isinstance(source, McpToolSource)
        await eventually(lambda: source.state.phase == "stopped", "the idle server to be closed")
        fake = server(await tools_of(client), "fake")
        assert fake["state"]["phase"] == "stopped"
        assert fake["state"]["reason"].startswith("closed after ")
        # Its tools stay known: the next call starts it again and uses them.
        assert fake["tools_from"] == "server" and fake["tools"]
        assert "starts again" in await page_of(client)


async def test_exec_enabled_without_a_sandbox_is_listed_with_why_its_commands_cannot_run(
    tmp_path: Path,
) -> None:
    exec_settings = {"exec": {"enabled": True, "bwrap": str(tmp_path / "no-bwrap")}}
    async with (
        FakeOpenAI() as llm,
        admin_bridge(tmp_path, llm, tools=exec_settings) as (_, _, base),
        client_of(base) as client,
    ):
        body = await tools_of(client)
        problem = group(body, "exec")["problem"]
        assert problem.startswith("tools.exec: enabled, but commands cannot run: bubblewrap is not installed")
        assert "exec" not in {item["name"] for item in body["left_out"]}
        assert problem in await page_of(client)
