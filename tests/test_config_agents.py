"""[agents.NAME] and [[agents.bindings]]: a malformed table is a config error that names its key and why;
a good one resolves each chat to its agent, with the reason /agent and /status give."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bridge.config import Settings
from bridge.config.agents import DEFAULT_AGENT
from bridge.config.io import render_settings, settings_from_toml
from bridge.errors import ConfigError

PROFILES = '[llm.profiles.local]\nmodel = "small"\n'


def config_error(text: str, path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        settings_from_toml(text, path)
    return str(caught.value)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            '[agents.support]\nmodel_profile = "fast"',
            "agents.support.model_profile: 'fast' is not a model profile; profiles: default, local",
        ),
        (
            '[agents.support]\nskills = ["invoices"]',
            "agents.support.skills: 'invoices' is not a skill; skills: none ([skills] paths finds none)",
        ),
        (
            '[agents.support]\nsystem_prompt = "Help."\nsystem_prompt_file = "support.md"',
            "agents.support.system_prompt_file: system_prompt is set too: keep one of the two",
        ),
        ('[agents.support]\nsystem_prompt = "  "', "agents.support.system_prompt: the prompt is empty"),
        ('[agents.support]\ntools = ["web"]', "agents.support.tools: unknown key"),
        ('[agents.support]\ntool_groups = ["web", " "]', "agents.support.tool_groups: an empty name"),
        ('[agents.support]\nlanguage = ""', "agents.support.language: empty"),
        ('[agents.default]\nlanguage = "German"', "agents.default: 'default' is reserved"),
        ('[agents.Support]\nlanguage = "German"', "agents.Support: 'Support' is not an agent name"),
        (
            '[[agents.bindings]]\nagent = "support"',
            "agents.bindings[0].agent: 'support' is not an agent; agents: default",
        ),
        (
            '[agents.support]\n[[agents.bindings]]\nagent = "support"\nmatch = { surface = "telegarm" }',
            "agents.bindings[0].match.surface: 'telegarm' is not a known surface",
        ),
        (
            '[[agents.bindings]]\nagent = "default"\nmatch = { chat_type = "room" }',
            "agents.bindings[0].match.chat_type: Input should be 'dm', 'group' or 'channel'",
        ),
    ],
)
def test_a_malformed_agents_table_is_an_error_naming_the_key(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "config.toml"
    assert config_error(PROFILES + toml, path).startswith(f"{path}: {message}")


def test_a_missing_prompt_file_is_named_with_its_path_beside_the_config(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "config.toml"
    said = config_error('[agents.support]\nsystem_prompt_file = "prompts/support.md"', path)
    assert said == (
        f"{path}: agents.support.system_prompt_file: {tmp_path / 'conf' / 'prompts' / 'support.md'} "
        "does not exist"
    )


def test_a_prompt_file_is_read_relative_to_the_config_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conf" / "prompts").mkdir(parents=True)
    (tmp_path / "conf" / "prompts" / "support.md").write_text("You are Support.\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # not the config's folder
    text = '[agents.support]\nsystem_prompt_file = "prompts/support.md"\nworkspace = "support-files"'
    settings = settings_from_toml(text, tmp_path / "conf" / "config.toml")
    support = settings.agents.get("support")
    assert support is not None and support.prompt == "You are Support.\n"
    assert support.workspace == tmp_path / "conf" / "support-files"


def test_a_chat_resolves_to_the_first_matching_binding_and_main_to_the_default() -> None:
    settings = Settings(
        agents={
            "support": {"system_prompt": "Support."},
            "team": {"tool_groups": ["files"]},
            "bindings": [
                {"agent": "support", "match": {"surface": "telegram", "chat_type": "group"}},
                {"agent": "team", "match": {"chat_type": "group"}},
                {"agent": "team", "match": {"chat_type": "dm"}},
            ],
        }
    )
    agents = settings.agents
    assert agents.names == [DEFAULT_AGENT, "support", "team"]
    assert agents.get("default") is None and agents.get("nobody") is None
    support = agents.resolve("telegram:group:-100")
    assert (support.name, support.reason) == (
        "support",
        "bound by binding 1 (surface=telegram, chat_type=group)",
    )
    # "group" covers Discord channels too, as in the send policy.
    assert agents.resolve("discord:channel:7").reason == "bound by binding 2 (chat_type=group)"
    assert agents.resolve("telegram:dm:5").name == "team"
    main = agents.resolve("main", "telegram")
    assert (main.name, main.reason, main.agent) == ("default", "main keeps the default agent", None)
    assert agents.resolve("cron:nightly").reason == "no binding matches this chat"
    chosen = agents.resolve("telegram:group:-100", chosen="team")
    assert (chosen.name, chosen.reason) == ("team", "chosen with /agent")
    gone = agents.resolve("telegram:group:-100", chosen="retired")
    assert gone.name == "support"
    assert gone.reason.startswith("the agent retired chosen with /agent is no longer configured; bound by")


def test_the_chats_model_choice_wins_over_its_agents_profile() -> None:
    settings = Settings(
        llm={"profiles": {"local": {"model": "small"}}},
        agents={"support": {"model_profile": "local"}, "bindings": [{"agent": "support"}]},
    )
    choice = settings.agents.resolve("telegram:group:1")
    assert choice.model_profile(None) == "local"
    assert choice.model_profile("default") == "default"
    assert settings.agents.resolve("main").model_profile(None) is None


def test_rendered_settings_show_the_agents_and_read_back_the_same(tmp_path: Path) -> None:
    text = (
        PROFILES
        + '[agents.support]\nsystem_prompt = "Help."\ntool_groups = ["web"]\nmodel_profile = "local"\n'
        + '[[agents.bindings]]\nagent = "support"\nmatch = { chat_type = "group" }\n'
    )
    settings = settings_from_toml(text, None)
    rendered = render_settings(settings)
    assert "[agents.support]" in rendered
    assert tomllib.loads(rendered)["agents"]["support"]["tool_groups"] == ["web"]
    again = settings_from_toml(rendered.replace('api_key = "<redacted>"', ""), None)
    assert again.agents == settings.agents
