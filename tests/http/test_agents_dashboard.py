"""The dashboard's session page and the admin API say which agent a chat has and why."""

from __future__ import annotations

import asyncio
import html
from pathlib import Path

from bridge.events import Inbound
from devkit.fakes.openai_server import FakeOpenAI, text
from tests.http.conftest import admin_bridge, client_of

AGENTS = {
    "support": {"system_prompt": "You are Support.", "tool_groups": []},
    "bindings": [{"agent": "support", "match": {"chat_type": "group"}}],
}


async def test_the_session_page_and_api_show_the_chats_agent_and_why(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm, admin_bridge(tmp_path, llm, agents=AGENTS) as (harness, _, base):
        llm.push(text("support here"), text("main here"))
        inbound = Inbound("test", "group", "g1", "alice", "hello", message_id="1", mentioned=True)
        done = await harness.bridge.handle(inbound)
        assert done is not None
        await asyncio.wait_for(done, 10)
        await harness.say("hi")
        async with client_of(base) as client:
            group_page = (await client.get("/sessions/test:group:g1", headers={"Accept": "text/html"})).text
            main_page = (await client.get("/sessions/main", headers={"Accept": "text/html"})).text
            detail = (await client.get("/api/sessions/test:group:g1")).json()
    reason = "bound by binding 1 (chat_type=group)"
    assert detail["agent"] == {"name": "support", "reason": reason, "source": "binding"}
    assert f'<dt>Agent</dt><dd>support <span class="muted">({html.escape(reason)})</span></dd>' in group_page
    assert (
        '<dt>Agent</dt><dd>default <span class="muted">(main keeps the default agent)</span></dd>'
        in main_page
    )
