"""Skills end to end: dispatcher → runner → real HTTP to the fake model → store, across turns and /clear."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import CORE_TOOLS, Harness, running_bridge
from tests.http.conftest import admin_bridge, client_of
from tests.test_cli import assert_no_traceback, bridge, first_request_for, write_config

BODY = "# PDF forms\nAlways read forms.md before filling a field."


@pytest.fixture
def skills(tmp_path: Path) -> dict[str, Any]:
    """The [skills] section of a Bridge with two skills, one with a file beside its SKILL.md."""
    root = tmp_path / "skills"
    for name, description, body in (
        ("pdf-forms", "Fill in PDF forms.", BODY),
        ("writing", "House style for long texts.", "Short sentences."),
    ):
        (root / name).mkdir(parents=True)
        (root / name / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: {description}\n---\n{body}\n", encoding="utf-8"
        )
    (root / "pdf-forms" / "forms.md").write_text("Names are case sensitive.\n", encoding="utf-8")
    return {"paths": [str(root)]}


def system_prompt(body: dict[str, Any]) -> str:
    assert body["messages"][0]["role"] == "system"
    return str(body["messages"][0]["content"])


def tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


async def say_after_restart(h: Harness, text: str) -> None:
    """h.say in a Bridge started again on the same database: the platform's message ids go on from
    where the first one's left off (a repeated id would be a redelivery, not a message)."""
    done = await h.bridge.handle(replace(h.inbound(text), message_id=f"after-restart-{text}"))
    assert done is not None
    await asyncio.wait_for(done, timeout=10)


async def test_the_prompt_lists_skills_and_load_skill_is_offered_with_the_core_tools(
    tmp_path: Path, fake_llm: FakeOpenAI, skills: dict[str, Any]
) -> None:
    fake_llm.push(fake.text("hi"))
    async with running_bridge(tmp_path, fake_llm, skills=skills) as h:
        await h.say("hello")
    prompt = system_prompt(fake_llm.requests[0])
    assert "## Available Skills" in prompt
    assert "- pdf-forms: Fill in PDF forms.\n- writing: House style for long texts." in prompt
    # Name and description only: no instructions until a skill is loaded.
    assert "forms.md" not in prompt and "## Skill:" not in prompt
    assert h.request_tools(0) == [*CORE_TOOLS, "load_skill"]


async def test_without_skills_nothing_is_listed_and_load_skill_is_not_sent(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("hi"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("hello")
    assert "Skills" not in system_prompt(fake_llm.requests[0])
    assert h.request_tools(0) == CORE_TOOLS


async def test_a_loaded_skill_stays_in_the_prompt_in_later_turns_and_goes_with_clear(
    tmp_path: Path, fake_llm: FakeOpenAI, skills: dict[str, Any]
) -> None:
    fake_llm.push(
        fake.tool_call("load_skill", {"name": "pdf-forms"}),
        fake.text("I will read forms.md first."),
        fake.text("Still following it."),
        fake.text("Fresh start."),
    )
    async with running_bridge(tmp_path, fake_llm, skills=skills) as h:
        await h.say("fill in the tax form")
        # load_skill returned the body and named the file beside it; from the next request of the same
        # run on, the body is in the system prompt too.
        (result,) = tool_results(fake_llm.requests[1])
        assert result.startswith(BODY)
        assert ".skills/pdf-forms/forms.md" in result
        assert f"## Skill: pdf-forms\n{BODY}" in system_prompt(fake_llm.requests[1])

        await h.say("and the next one")
        turn = h.first_request_of_turn("and the next one")
        prompt = system_prompt(fake_llm.requests[turn])
        assert "- pdf-forms (loaded): Fill in PDF forms." in prompt
        assert f"## Skill: pdf-forms\n{BODY}" in prompt
        assert "## Skill: writing" not in prompt
        await h.say("/status")
        assert "Loaded skills: pdf-forms" in h.sender.of("notice")[-1]

        await h.say("/clear")
        await h.say("hello again")
        turn = h.first_request_of_turn("hello again")
        prompt = system_prompt(fake_llm.requests[turn])
        assert "- pdf-forms: Fill in PDF forms." in prompt
        assert "(loaded)" not in prompt and "## Skill:" not in prompt
        await h.say("/status")
        assert "Loaded skills: none" in h.sender.of("notice")[-1]
    # One load in all: the later turn had the skill without calling load_skill again.
    calls = [
        c["function"]["name"]
        for body in fake_llm.requests
        for m in body["messages"]
        for c in m.get("tool_calls") or []
    ]
    assert set(calls) == {"load_skill"}
    assert h.sender.of("reply") == ["I will read forms.md first.", "Still following it.", "Fresh start."]


async def test_a_skill_loaded_long_ago_is_restored_from_history_after_a_restart(
    tmp_path: Path, fake_llm: FakeOpenAI, skills: dict[str, Any]
) -> None:
    # A window of 4 rows: the load's call and result leave it after two more turns.
    agent = {"history_limit": 4, "compaction": False}
    fake_llm.push(fake.tool_call("load_skill", {"name": "writing"}), fake.text("ok"), *[fake.text("k")] * 3)
    async with running_bridge(tmp_path, fake_llm, skills=skills, agent=agent) as h:
        await h.say("use the house style")
        await h.say("one")
        await h.say("two")
    async with running_bridge(tmp_path, fake_llm, skills=skills, agent=agent) as h:
        await say_after_restart(h, "three")
        body = fake_llm.requests[h.first_request_of_turn("three")]
    # The load has left the replayed history: the prompt has the skill from the one indexed query.
    assert "load_skill" not in json.dumps(body["messages"][1:])
    assert "## Skill: writing\nShort sentences." in system_prompt(body)


async def test_a_skill_no_longer_configured_is_dropped_without_a_word(
    tmp_path: Path, fake_llm: FakeOpenAI, skills: dict[str, Any]
) -> None:
    fake_llm.push(fake.tool_call("load_skill", {"name": "writing"}), fake.text("ok"), fake.text("k"))
    async with running_bridge(tmp_path, fake_llm, skills=skills) as h:
        await h.say("use the house style")
    (Path(skills["paths"][0]) / "writing" / "SKILL.md").unlink()
    async with running_bridge(tmp_path, fake_llm, skills=skills) as h:
        await say_after_restart(h, "again")
        await h.say("/status")
        status = h.sender.of("notice")[-1]
    prompt = system_prompt(fake_llm.requests[-1])
    assert "writing" not in prompt and "## Skill:" not in prompt
    assert "Loaded skills: none" in status


async def test_the_api_and_the_dashboard_show_a_sessions_loaded_skills(
    tmp_path: Path, fake_llm: FakeOpenAI, skills: dict[str, Any]
) -> None:
    fake_llm.push(fake.tool_call("load_skill", {"name": "writing"}), fake.text("ok"))
    async with (
        admin_bridge(tmp_path, fake_llm, skills=skills) as (h, _, base),
        client_of(base) as client,
    ):
        await h.say("use the house style")
        detail = (await client.get("/api/sessions/main")).json()
        page = (await client.get("/sessions/main", headers={"Accept": "text/html"})).text
    assert detail["loaded_skills"] == ["writing"]
    assert re.search(r"<dt>Loaded skills</dt><dd><span class=\"chip\">writing</span></dd>", page), page


async def test_bridge_chat_loads_a_skill_keeps_it_for_the_next_line_and_drops_it_on_clear(
    tmp_path: Path, fake_llm: FakeOpenAI, skills: dict[str, Any]
) -> None:
    config = write_config(tmp_path, fake_llm.base_url)
    with config.open("a", encoding="utf-8") as out:
        out.write(f"[skills]\npaths = {json.dumps(skills['paths'])}\n")
    fake_llm.push(
        fake.tool_call("load_skill", {"name": "pdf-forms"}),
        fake.text("loaded"),
        fake.text("k"),
        fake.text("k"),
    )
    done = await bridge(
        "chat",
        "--config",
        str(config),
        cwd=tmp_path,
        lines=("fill in a form", "the next one", "/status", "/clear", "/status", "hello"),
    )
    assert done.code == 0, done.output
    assert_no_traceback(done)
    assert any("load_skill" in line and "✓" in line for line in done.stdout.splitlines()), done.stdout
    assert f"## Skill: pdf-forms\n{BODY}" in system_prompt(
        fake_llm.requests[first_request_for(fake_llm, "the next one")]
    )
    assert "## Skill:" not in system_prompt(fake_llm.requests[first_request_for(fake_llm, "hello")])
    before, after = done.stdout.split("» Session: ")[1:3]
    assert "Loaded skills: pdf-forms" in before
    assert "Loaded skills: none" in after
