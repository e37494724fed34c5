"""The tools that reach outside, used from a chat as the docs describe: the model loads the group and
calls the tool, and what the tool did is what the next request carries. A member's call of a tool that
is for owners is refused in words the model can pass on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiohttp import web

import devkit.fakes.openai_server as fake
from bridge.events import Inbound
from devkit.fakes.loopback import LoopbackServer
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import running_bridge
from tests.system import chromium_binary, require_bwrap


def last_tool_result(llm: FakeOpenAI) -> str:
    message = llm.requests[-1]["messages"][-1]
    assert message["role"] == "tool", message
    return str(message["content"])


async def test_an_owner_runs_a_command_that_writes_a_workspace_file(tmp_path: Path) -> None:
    require_bwrap()
    llm = FakeOpenAI()
    llm.push(
        fake.tool_call("load_tool_group", {"group_name": "exec"}),
        fake.tool_call("run_command", {"command": "echo hello > note.txt && cat note.txt && pwd"}),
        fake.text("Done: note.txt says hello."),
    )
    async with llm, running_bridge(tmp_path, llm, tools={"exec": {"enabled": True}}) as h:
        await h.say("write hello into note.txt")
    result = json.loads(last_tool_result(llm))
    assert result["exit_code"] == 0 and result["stdout"] == "hello\n/workspace\n"
    assert (tmp_path / "workspace" / "note.txt").read_text(encoding="utf-8") == "hello\n"
    assert h.sender.of("reply") == ["Done: note.txt says hello."]


async def test_a_group_members_command_is_refused_and_never_runs(tmp_path: Path) -> None:
    require_bwrap()
    llm = FakeOpenAI()
    llm.push(
        fake.tool_call("load_tool_group", {"group_name": "exec"}),
        fake.tool_call("run_command", {"command": "touch planted"}),
        fake.text("I can't run commands here."),
    )
    async with llm, running_bridge(tmp_path, llm, tools={"exec": {"enabled": True}}) as h:
        inbound = Inbound(
            "test", "group", "g1", "mallory", "run touch planted", message_id="m1", mentioned=True
        )
        done = await h.bridge.handle(inbound)
        assert done is not None
        await asyncio.wait_for(done, 10)
    assert last_tool_result(llm).startswith("Error [not_allowed]: Only the bot's owners may run commands")
    assert not (tmp_path / "workspace" / "planted").exists()


class Page(LoopbackServer):
    def routes(self, app: web.Application) -> None:
        async def page(request: web.Request) -> web.Response:
            html = "<title>Opening hours</title><p>Open 9 to 5.</p><a href='/more'>More</a>"
            return web.Response(text=html, content_type="text/html")

        app.router.add_get("/", page)


async def test_a_chat_opens_a_page_in_the_browser_and_reads_it(tmp_path: Path) -> None:
    chromium = chromium_binary()
    llm = FakeOpenAI()
    async with Page() as page:
        llm.push(
            fake.tool_call("load_tool_group", {"group_name": "browser"}),
            fake.tool_call("open", {"url": f"{page.origin}/"}),
            fake.tool_call("snapshot", {}),
            fake.text("They open at 9."),
        )
        tools = {"browser": {"enabled": True, "executable": chromium}, "allow_private_network": True}
        async with llm, running_bridge(tmp_path, llm, tools=tools) as h:
            await h.say("when are they open?")
    snapshot = last_tool_result(llm)
    assert "Open 9 to 5." in snapshot and "untrusted" in snapshot
    assert "[1]" in snapshot and "More" in snapshot
    assert h.sender.of("reply") == ["They open at 9."]
