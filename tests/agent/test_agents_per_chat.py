"""Agents per chat: [agents.NAME] bound to chats by [[agents.bindings]] or an owner's /agent, each with
its own prompt, tool groups, skills, workspace, model and language, end to end on the fake models."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bridge.config.io import load_settings
from bridge.events import Inbound
from bridge.reload import ConfigReloader
from devkit.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.harness import CORE_TOOLS, OWNER, Harness, pdf_group, running_bridge

SUPPORT_PROMPT = "You are the support desk of Example Ltd."
TEAM_PROMPT = "You are the team's release helper."
G1, G2 = "test:group:g1", "test:group:g2"


@pytest.fixture
async def other_llm() -> AsyncIterator[FakeOpenAI]:
    """The `other` profile's model server: the support agent's."""
    async with FakeOpenAI() as server:
        yield server


def two_agents(tmp_path: Path, other: FakeOpenAI) -> dict[str, Any]:
    """Sections for running_bridge: support (pdf only, the other model, German, a workspace of its
    own) bound to g1; team (files only, no skills) bound to every other group."""
    return {
        "llm": {"profiles": {"other": {"base_url": other.base_url, "model": "fake-other"}}},
        "agents": {
            "support": {
                "system_prompt": SUPPORT_PROMPT,
                "tool_groups": ["pdf"],
                "model_profile": "other",
                "language": "German",
            },
            "team": {
                "system_prompt": TEAM_PROMPT,
                "tool_groups": ["files"],
                "skills": [],
                "workspace": str(tmp_path / "team-files"),
            },
            "bindings": [
                {"agent": "support", "match": {"key_prefix": G1}},
                {"agent": "team", "match": {"chat_type": "group"}},
            ],
        },
    }


def in_group(chat_id: str, text: str, sender: str = "alice") -> Inbound:
    return Inbound(
        surface="test",
        chat_type="group",
        chat_id=chat_id,
        sender_id=sender,
        text=text,
        message_id=f"{chat_id}-{sender}-{text}",
        mentioned=True,
    )


async def group_says(h: Harness, chat_id: str, text: str, sender: str = "alice") -> None:
    done = await h.bridge.handle(in_group(chat_id, text, sender))
    if done is not None:
        await asyncio.wait_for(done, 10)


def system_of(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


def tools_of(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


def listed_groups(system: str) -> list[str]:
    """The group names of the prompt's "Available Tool Groups" section."""
    _, found, listing = system.partition("## Available Tool Groups")
    if not found:
        return []
    lines = listing.split("\n\n")[0].splitlines()
    return [line[2:].split(":")[0].removesuffix(" (loaded)") for line in lines if line.startswith("- ")]


def notices_in(h: Harness, chat_id: str) -> list[str]:
    return [item.text for item in h.sender.sent if item.kind == "notice" and item.route.chat_id == chat_id]


def tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


# -- two chats, two agents -----------------------------------------------------------------------


async def test_two_chats_bound_to_two_agents_answer_with_their_own_prompts_tools_and_models(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    other_llm.push(tool_call("load_tool_group", {"group_name": "pdf"}), text("Hallo!"))
    fake_llm.push(
        tool_call("load_tool_group", {"group_name": "files"}),
        tool_call("write_file", {"path": "notes.txt", "content": "ship it"}),
        text("Written."),
        text("Hi owner."),
    )
    async with running_bridge(
        tmp_path, fake_llm, extra_groups=(pdf_group(),), **two_agents(tmp_path, other_llm)
    ) as h:
        await group_says(h, "g1", "hello support")
        await group_says(h, "g2", "note this")
        await h.say("and main?")
        traces = {}
        for key in (G1, "main"):
            run, _ = (await h.bridge.store.list_runs(session_key=key, limit=1))[0]
            traces[key] = json.loads(await h.bridge.store.get_trace(run.id) or "{}")

    # g1: the support agent, on its own model server, in German, with only its group.
    assert len(other_llm.requests) == 2
    support = system_of(other_llm.requests[0])
    assert support.startswith(f"{SUPPORT_PROMPT}\n\nAnswer in German.")
    assert "You are Bridge" not in support
    assert listed_groups(support) == ["pdf"]
    assert tools_of(other_llm.requests[0]) == CORE_TOOLS
    assert tools_of(other_llm.requests[1]) == [*CORE_TOOLS, "pdf_info", "pdf_extract_text"]
    assert other_llm.requests[0]["model"] == "fake-other"

    # g2: the team agent, on [llm], with only the files group, writing into its own workspace.
    team = system_of(fake_llm.requests[0])
    assert team.startswith(TEAM_PROMPT) and "Answer in" not in team
    assert listed_groups(team) == ["files"]
    assert tools_of(fake_llm.requests[0]) == CORE_TOOLS
    assert "write_file" in tools_of(fake_llm.requests[1]) and "pdf_info" not in tools_of(fake_llm.requests[1])
    assert (tmp_path / "team-files" / "notes.txt").read_text(encoding="utf-8") == "ship it"
    assert not (tmp_path / "workspace" / "notes.txt").exists()

    # main keeps the default agent: [agent]'s prompt, every group.
    main = system_of(fake_llm.requests[3])
    assert main.startswith("You are Bridge")
    assert listed_groups(main) == ["sessions", "files", "web", "scheduled_tasks", "pdf"]
    assert h.sender.of("reply") == ["Hallo!", "Written.", "Hi owner."]
    assert traces[G1]["agent"] == "support" and traces[G1]["profile"] == "other"
    assert "agent" not in traces["main"]


async def test_a_group_the_agent_may_not_use_is_not_loaded_and_its_tools_do_not_run(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        tool_call("load_tool_group", {"group_name": "pdf"}),
        tool_call("pdf_info", {"path": "a.pdf"}),
        text("I can't read PDFs here."),
    )
    async with running_bridge(
        tmp_path, fake_llm, extra_groups=(pdf_group(),), **two_agents(tmp_path, other_llm)
    ) as h:
        await group_says(h, "g2", "read a.pdf")
    second, third = fake_llm.requests[1], fake_llm.requests[2]
    assert tool_results(second) == [
        "Error [not_available]: Tool group 'pdf' is not available in this chat. Available groups: files"
    ]
    assert tools_of(second) == CORE_TOOLS and tools_of(third) == CORE_TOOLS
    assert tool_results(third)[-1].startswith("Error [unknown_tool]: There is no tool named 'pdf_info'.")


async def test_a_group_loaded_under_another_agent_is_neither_listed_nor_sent_after_a_switch(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    sections = two_agents(tmp_path, other_llm)
    sections["agents"]["bindings"] = []  # g3 starts on the default agent
    fake_llm.push(
        tool_call("load_tool_group", {"group_name": "pdf"}),
        text("Loaded."),
        tool_call("load_tool_group", {"group_name": "pdf"}),
        text("Not here."),
    )
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),), **sections) as h:
        await group_says(h, "g3", "load pdf")
        before = fake_llm.requests[1]
        await group_says(h, "g3", "/agent team", sender=OWNER)
        await group_says(h, "g3", "/status", sender=OWNER)
        await group_says(h, "g3", "and now?")
    assert "pdf_info" in tools_of(before) and "pdf" in listed_groups(system_of(before))
    after = fake_llm.requests[2]
    assert system_of(after).startswith(TEAM_PROMPT)
    # Loaded in this session's history under the default agent, but not the team agent's.
    assert listed_groups(system_of(after)) == ["files"]
    assert tools_of(after) == CORE_TOOLS
    assert tool_results(fake_llm.requests[3])[-1].startswith("Error [not_available]: Tool group 'pdf'")
    switched, status = notices_in(h, "g3")
    assert switched.startswith("This chat now uses the agent team.")
    assert "Loaded tool groups: none" in status
    assert "Agent: team (chosen with /agent)" in status


async def test_an_agents_skills_are_the_only_ones_listed_and_loaded(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    for name in ("invoices", "releases"):
        folder = tmp_path / "skills" / name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: about {name}\n---\nThe {name} steps.\n", encoding="utf-8"
        )
    agents = {
        "billing": {"skills": ["invoices"]},
        "bindings": [{"agent": "billing", "match": {"chat_type": "group"}}],
    }
    fake_llm.push(tool_call("load_skill", {"name": "releases"}), text("No such skill."))
    skills = {"paths": [str(tmp_path / "skills")]}
    async with running_bridge(tmp_path, fake_llm, skills=skills, agents=agents) as h:
        await group_says(h, "g1", "how do releases go?")
    system = system_of(fake_llm.requests[0])
    assert "- invoices: about invoices" in system and "releases" not in system
    assert tool_results(fake_llm.requests[1]) == [
        "Error [not_found]: Skill 'releases' not found. Available skills: invoices"
    ]


# -- /agent -------------------------------------------------------------------------------------


async def test_agent_switches_a_chat_survives_clear_and_default_goes_back_to_the_bindings(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    fake_llm.push(text("team here"))
    other_llm.push(text("support again"))
    async with running_bridge(tmp_path, fake_llm, **two_agents(tmp_path, other_llm)) as h:
        await group_says(h, "g1", "/agent", sender=OWNER)
        await group_says(h, "g1", "/agent team", sender=OWNER)
        await group_says(h, "g1", "/clear", sender=OWNER)
        await group_says(h, "g1", "/agent")
        await group_says(h, "g1", "after clear")
        await group_says(h, "g1", "/agent default", sender=OWNER)
        await group_says(h, "g1", "back to support")
        row = await h.bridge.store.active_session(G1)
    shown, switched, _, kept, back = notices_in(h, "g1")
    assert shown.splitlines() == [
        f"Agent: support (bound by binding 1 (key_prefix={G1}))",
        "Agents: default, support, team.",
        "Owners switch with /agent NAME; /agent default follows the bindings of the config.",
    ]
    assert switched == (
        "This chat now uses the agent team. It stays for this chat, across /clear, until /agent changes "
        "it (/agent default follows the bindings of the config)."
    )
    assert kept.startswith("Agent: team (chosen with /agent)")
    bound = f"support (bound by binding 1 (key_prefix={G1}))"
    assert back == f"This chat follows the bindings of the config: agent {bound}"
    assert row is not None and row.agent is None
    assert system_of(fake_llm.requests[0]).startswith(TEAM_PROMPT)
    assert system_of(other_llm.requests[0]).startswith(SUPPORT_PROMPT)
    assert h.sender.of("reply") == ["team here", "support again"]


async def test_only_owners_switch_an_agent_and_main_keeps_the_default_agent(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    sections = two_agents(tmp_path, other_llm)
    # A binding of every DM: main is a DM, and still keeps the default agent.
    sections["agents"]["bindings"].insert(0, {"agent": "team", "match": {"chat_type": "dm"}})
    fake_llm.push(text("main here"), text("bob here"))
    async with running_bridge(tmp_path, fake_llm, **sections) as h:
        await group_says(h, "g1", "/agent team")
        await h.say("/agent team")
        await h.say("/agent")
        await h.say("hello")
        await h.say("hi", sender="bob")
        group = await h.bridge.store.active_session(G1)
    refused, main_refused, main_shown, *_ = h.sender.of("notice")
    assert refused == "Only an owner of this bot can change the agent of a chat."
    assert group is not None and group.agent is None
    assert main_refused == "main keeps the default agent: /agent NAME changes the agent of another chat."
    assert main_shown.startswith("Agent: default (main keeps the default agent)")
    assert system_of(fake_llm.requests[0]).startswith("You are Bridge")
    # bob's own DM is a DM too: the binding gives it the team agent.
    assert system_of(fake_llm.requests[1]).startswith(TEAM_PROMPT)


async def test_model_wins_over_the_agents_model_profile(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    other_llm.push(text("from the agent's model"))
    fake_llm.push(text("from [llm]"))
    async with running_bridge(tmp_path, fake_llm, **two_agents(tmp_path, other_llm)) as h:
        await group_says(h, "g1", "one")
        await group_says(h, "g1", "/model", sender=OWNER)
        await group_says(h, "g1", "/model default", sender=OWNER)
        await group_says(h, "g1", "two")
        await group_says(h, "g1", "/status", sender=OWNER)
    listing, _, status = notices_in(h, "g1")
    assert "▶ other: model fake-other" in listing
    assert "This chat's agent support picks other." in listing
    assert "Model: default (fake)" in status
    assert h.sender.of("reply") == ["from the agent's model", "from [llm]"]
    # The run still has the support agent's prompt: only the model changed.
    assert system_of(fake_llm.requests[0]).startswith(SUPPORT_PROMPT)


async def test_status_shows_the_chats_agent_and_why(
    tmp_path: Path, fake_llm: FakeOpenAI, other_llm: FakeOpenAI
) -> None:
    async with running_bridge(tmp_path, fake_llm, **two_agents(tmp_path, other_llm)) as h:
        await group_says(h, "g2", "/status")
        await h.say("/status")
    group, main = h.sender.of("notice")
    assert "Agent: team (bound by binding 2 (chat_type=group))" in group.splitlines()
    assert "Agent: default (main keeps the default agent)" in main.splitlines()


# -- reload ----------------------------------------------------------------------------------


def config_text(base_url: str, tmp_path: Path, bindings: str) -> str:
    return f"""
owners = ["test:{OWNER}"]

[llm]
base_url = "{base_url}"
model = "fake"
max_retries = 0
timeout_s = 5

[storage]
path = "{tmp_path / "bridge.db"}"

[tools]
workspace = "{tmp_path / "workspace"}"

[agents.support]
system_prompt_file = "support.md"

[agents.team]
system_prompt = "{TEAM_PROMPT}"

{bindings}
"""


async def test_a_config_reload_changes_a_binding_while_the_bot_runs(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    (tmp_path / "support.md").write_text(SUPPORT_PROMPT + "\n", encoding="utf-8")
    path = tmp_path / "config.toml"
    bound = f'[[agents.bindings]]\nagent = "support"\nmatch = {{ key_prefix = "{G1}" }}'
    path.write_text(config_text(fake_llm.base_url, tmp_path, bound), encoding="utf-8")
    settings = load_settings(path)
    fake_llm.push(text("one"), text("two"))
    agents = {
        "support": {"system_prompt_file": str(tmp_path / "support.md")},
        "team": {"system_prompt": TEAM_PROMPT},
        "bindings": [{"agent": "support", "match": {"key_prefix": G1}}],
    }
    async with running_bridge(tmp_path, fake_llm, agents=agents) as h:
        reloader = ConfigReloader(path, settings, h.bridge.apply_live_settings)
        await group_says(h, "g1", "before")
        path.write_text(
            config_text(fake_llm.base_url, tmp_path, bound.replace("support", "team")), encoding="utf-8"
        )
        assert reloader.reload()
        await group_says(h, "g1", "after")
        await group_says(h, "g1", "/agent")
    assert system_of(fake_llm.requests[0]).startswith(SUPPORT_PROMPT)
    assert system_of(fake_llm.requests[1]).startswith(TEAM_PROMPT)
    assert notices_in(h, "g1")[0].startswith(f"Agent: team (bound by binding 1 (key_prefix={G1}))")
