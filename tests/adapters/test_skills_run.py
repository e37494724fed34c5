"""Skills through a real `bridge run` on the fake Telegram: listed, loaded, kept for the next message,
shown by /status, and gone after /clear."""

from __future__ import annotations

from pathlib import Path

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import bridge_running, telegram_run_config
from tests.adapters.conftest import OWNER
from tests.adapters.test_mcp_run import replies

SKILL = """---
name: house-style
description: How we write emails and reports.
---
Write in short sentences. Sign every email with "The Bridge team".
"""


def system(request: dict) -> str:
    return str(request["messages"][0]["content"])


async def test_bridge_run_loads_a_skill_keeps_it_shows_it_and_clear_drops_it(
    tmp_path: Path, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    (tmp_path / "skills" / "house-style").mkdir(parents=True)
    (tmp_path / "skills" / "house-style" / "SKILL.md").write_text(SKILL, encoding="utf-8")
    fake_llm.push(
        fake.tool_call("load_skill", {"name": "house-style"}),
        fake.text("loaded the style"),
        fake.text("Hello. The Bridge team"),
        fake.text("a fresh start"),
    )
    extra = f'[skills]\npaths = ["{tmp_path / "skills"}"]\n'
    config = telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, fake_llm.base_url, extra)
    async with bridge_running(tmp_path, config):
        tg.dm(OWNER, "write like us")
        await tg.wait_for(lambda: len(replies(tg)) >= 1, timeout=30)
        tg.dm(OWNER, "draft a hello")
        await tg.wait_for(lambda: len(replies(tg)) >= 2, timeout=30)
        tg.dm(OWNER, "/status")
        await tg.wait_for(lambda: any("Loaded skills" in r for r in replies(tg)), timeout=30)
        tg.dm(OWNER, "/clear")
        await tg.wait_for(lambda: len(replies(tg)) >= 4, timeout=30)
        tg.dm(OWNER, "hi")
        await tg.wait_for(lambda: "a fresh start" in replies(tg), timeout=30)
    first, second, after_clear = fake_llm.requests[0], fake_llm.requests[2], fake_llm.requests[3]
    assert "## Available Skills" in system(first)
    assert "- house-style: How we write emails and reports." in system(first)
    assert "load_skill" in [t["function"]["name"] for t in first["tools"]]
    assert "## Skill: house-style" not in system(first)
    # The next message: the skill's instructions are in the prompt, without a second load_skill.
    assert "- house-style (loaded):" in system(second)
    assert 'Sign every email with "The Bridge team".' in system(second)
    status = next(r for r in replies(tg) if "Loaded skills" in r)
    assert "Loaded skills: house-style" in status
    assert "## Skill: house-style" not in system(after_clear)
    assert "(loaded)" not in system(after_clear)
