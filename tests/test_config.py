"""Settings: file discovery, environment overrides, operator-worded errors, the example, rendering."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from bridge.config import Settings
from bridge.config.agent import DEFAULT_SYSTEM_PROMPT
from bridge.config.base import REDACTED, relative_to
from bridge.config.io import load_settings, render_settings
from bridge.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parent.parent / "config.example.toml"
# A key documented but left unset (no TOML null exists): "# key = value" on a line of its own.
_COMMENTED_KEY = re.compile(r"^# ([a-z_]+) = (.+)$")
_SECTION = re.compile(r"^\[([a-z_.]+)\]$")


# No BRIDGE_* variable of the outer environment and no ./config.toml of the repo leaks in.
pytestmark = pytest.mark.usefixtures("isolated_config")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def beside(config: Path, **values: Any) -> Settings:
    """Settings(**values) as a config file at CONFIG gives them: relative paths from its folder."""
    with relative_to(config):
        return Settings(**values)


def config_error(path: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value)


# -- where settings come from ----------------------------------------------------------------


def test_defaults_without_a_file() -> None:
    settings = load_settings()
    assert settings == Settings()
    assert settings.owners == []
    assert settings.llm.base_url is None
    assert settings.llm.api_key.get_secret_value() == ""
    assert settings.llm.model == "gpt-4o-mini"
    assert settings.llm.timeout_s == 60.0
    assert settings.llm.max_retries == 3
    assert settings.storage.path == Path("data/bridge.db")
    assert settings.tools.workspace == Path("data/workspace")
    assert settings.tools.allow_private_network is False
    assert settings.agent.system_prompt == DEFAULT_SYSTEM_PROMPT


def test_config_toml_in_the_working_directory_is_used(tmp_path: Path) -> None:
    write(tmp_path / "config.toml", 'owners = ["console:local", "telegram:42"]\n[llm]\nmodel = "from-cwd"\n')
    settings = load_settings()
    assert settings.llm.model == "from-cwd"
    assert settings.owners == ["console:local", "telegram:42"]


def test_explicit_config_wins_over_the_working_directory(tmp_path: Path) -> None:
    write(tmp_path / "config.toml", '[llm]\nmodel = "from-cwd"\n')
    other = write(tmp_path / "other.toml", '[llm]\nmodel = "from-flag"\n[storage]\npath = "x/y.db"\n')
    settings = load_settings(other)
    assert settings.llm.model == "from-flag"
    assert settings.storage.path == tmp_path / "x" / "y.db"  # from the file's folder


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(
        tmp_path / "config.toml",
        '[llm]\nmodel = "file-model"\ntimeout_s = 5\n[tools]\nallow_private_network = false\n',
    )
    monkeypatch.setenv("BRIDGE_LLM__MODEL", "env-model")
    monkeypatch.setenv("BRIDGE_TOOLS__ALLOW_PRIVATE_NETWORK", "true")
    settings = load_settings(config)
    assert settings.llm.model == "env-model"
    assert settings.tools.allow_private_network is True
    # Keys the environment does not mention keep the file's value.
    assert settings.llm.timeout_s == 5.0


def test_environment_names_are_case_insensitive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(tmp_path / "config.toml", '[llm]\nmodel = "file-model"\n')
    monkeypatch.setenv("bridge_llm__model", "lower-model")
    monkeypatch.setenv("Bridge_Tools__Allow_Private_Network", "TRUE")
    settings = load_settings(config)
    assert settings.llm.model == "lower-model"
    assert settings.tools.allow_private_network is True


def test_environment_lists_are_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_OWNERS", '["console:local", "telegram:42"]')
    monkeypatch.setenv("BRIDGE_TOOLS__TIMEOUTS", '{"webfetch": 20}')
    settings = load_settings()
    assert settings.owners == ["console:local", "telegram:42"]
    assert settings.tools.timeouts == {"webfetch": 20.0}


# -- errors name the key and the reason ------------------------------------------------------


def test_unknown_key_is_named(tmp_path: Path) -> None:
    config = write(tmp_path / "config.toml", '[storage]\npth = "data/x.db"\n')
    message = config_error(config)
    assert "storage.pth" in message
    assert "unknown key" in message
    assert str(config) in message


def test_unknown_section_and_top_level_key_are_named(tmp_path: Path) -> None:
    config = write(tmp_path / "config.toml", 'ownr = []\n[llmm]\nmodel = "x"\n')
    message = config_error(config)
    assert "ownr: unknown key" in message
    assert "llmm: unknown key" in message


def test_wrong_type_is_named(tmp_path: Path) -> None:
    message = config_error(write(tmp_path / "config.toml", '[llm]\ntimeout_s = "soon"\n'))
    assert "llm.timeout_s" in message
    assert "number" in message


def test_negative_max_retries_is_named(tmp_path: Path) -> None:
    message = config_error(write(tmp_path / "config.toml", "[llm]\nmax_retries = -1\n"))
    assert "llm.max_retries" in message
    assert "greater than or equal to 0" in message


def test_a_silent_worker_timeout_shorter_than_two_beats_is_named(tmp_path: Path) -> None:
    # Under 10 s, a living worker whose beat came late could have its connections ended.
    message = config_error(write(tmp_path / "config.toml", "[storage]\nsilent_worker_timeout_s = 5\n"))
    assert "storage.silent_worker_timeout_s" in message
    assert "greater than or equal to 10" in message


def test_bad_owner_is_named_with_the_reason(tmp_path: Path) -> None:
    message = config_error(write(tmp_path / "config.toml", 'owners = ["42"]\n'))
    assert "owners" in message
    assert "'42'" in message
    assert "surface:user_id" in message


def test_a_zone_folder_is_not_a_timezone(tmp_path: Path) -> None:
    message = config_error(write(tmp_path / "config.toml", '[agent]\ntimezone = "Europe"\n'))
    assert "agent.timezone" in message and "'Europe' is not an IANA time zone" in message


def test_bad_timezone_is_named(tmp_path: Path) -> None:
    message = config_error(write(tmp_path / "config.toml", '[agent]\ntimezone = "Mars/Olympus"\n'))
    assert "agent.timezone" in message
    assert "Mars/Olympus" in message
    assert "IANA" in message


def test_bad_base_url_is_named(tmp_path: Path) -> None:
    message = config_error(write(tmp_path / "config.toml", '[llm]\nbase_url = "127.0.0.1:8080"\n'))
    assert "llm.base_url" in message
    assert "http://" in message


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    config = write(tmp_path / "config.toml", '[llm]\nmax_retries = -1\n[storage]\npth = "x"\n')
    message = config_error(config)
    assert "llm.max_retries" in message
    assert "storage.pth" in message


def test_bad_environment_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_LLM__TIMEOUT_S", "soon")
    assert "llm.timeout_s" in config_error()


def test_a_bad_environment_value_is_blamed_on_the_variable_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "c.toml", '[llm]\nmodel = "m"\n')
    monkeypatch.setenv("BRIDGE_LLM__TIMEOUT_S", "soon")
    message = config_error(path)
    assert message.startswith("environment variable BRIDGE_LLM__TIMEOUT_S: llm.timeout_s:")
    assert "c.toml" not in message


def test_log_level_accepts_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_LOG_LEVEL", "debug")
    assert load_settings().log_level == "DEBUG"


def test_environment_list_that_is_not_json_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # A natural mistake: a list written as a bare value rather than JSON.
    monkeypatch.setenv("BRIDGE_OWNERS", "telegram:42")
    monkeypatch.setenv("BRIDGE_TOOLS__DISABLED", "web")
    monkeypatch.setenv("BRIDGE_TOOLS__WORKSPACE", "not/json/but/a/scalar")
    message = config_error()
    assert "BRIDGE_OWNERS" in message
    assert "BRIDGE_TOOLS__DISABLED" in message
    assert "BRIDGE_TOOLS__WORKSPACE" not in message
    assert "JSON" in message


def test_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    config = write(tmp_path / "config.toml", '[llm]\nmodel = "ok"\ntimeout_s = = 3\n')
    message = config_error(config)
    assert str(config) in message
    assert "invalid TOML" in message
    assert "line 3" in message


def test_missing_explicit_config_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    message = config_error(missing)
    assert str(missing) in message
    assert "not found" in message


# -- config.example.toml ---------------------------------------------------------------------


def _model_at(section: str) -> type[BaseModel]:
    """The settings model of a dotted section name ("" is the top level)."""
    model: type[BaseModel] = Settings
    for part in filter(None, section.split(".")):
        annotation = model.model_fields[part].annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel)
        model = annotation
    return model


def _is_section(model: type[BaseModel], name: str) -> bool:
    annotation = model.model_fields[name].annotation if name in model.model_fields else None
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _example_keys() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(section, key) pairs of the example: set ones (via tomllib) and documented-but-unset ones."""
    active: set[tuple[str, str]] = set()

    def walk(section: str, table: dict[str, object]) -> None:
        model = _model_at(section)
        for name, value in table.items():
            if isinstance(value, dict) and _is_section(model, name):
                walk(f"{section}.{name}".lstrip("."), value)
            else:
                active.add((section, name))

    walk("", tomllib.loads(EXAMPLE.read_text(encoding="utf-8")))
    commented = set()
    section = ""
    for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
        if match := _SECTION.match(line):
            section = match.group(1)
        elif match := _COMMENTED_KEY.match(line):
            commented.add((section, match.group(1)))
    return active, commented


def _settings_keys(section: str = "") -> set[tuple[str, str]]:
    keys = set()
    model = _model_at(section)
    for name in model.model_fields:
        if _is_section(model, name):
            keys |= _settings_keys(f"{section}.{name}".lstrip("."))
        else:
            keys.add((section, name))
    return keys


def test_example_loads_cleanly() -> None:
    settings = load_settings(EXAMPLE)
    assert settings.llm.base_url == "http://127.0.0.1:8080/v1"
    assert settings.llm.api_key.get_secret_value() == ""


def test_example_values_are_the_defaults() -> None:
    settings = load_settings(EXAMPLE)
    expected = beside(EXAMPLE)
    expected.llm.base_url = "http://127.0.0.1:8080/v1"
    assert settings == expected


def test_example_documents_every_setting() -> None:
    active, commented = _example_keys()
    assert not active & commented, "a key is both set and commented out"
    missing = _settings_keys() - (active | commented)
    assert not missing, f"config.example.toml does not document: {sorted(missing)}"
    stray = (active | commented) - _settings_keys()
    assert not stray, f"config.example.toml documents keys Settings does not have: {sorted(stray)}"


def test_example_leaves_only_unset_defaults_commented_out() -> None:
    _, commented = _example_keys()
    for section, key in commented:
        model = _model_at(section)
        assert model.model_fields[key].default is None, f"{section}.{key} has a default; set it"


def test_example_with_every_key_uncommented_still_loads(tmp_path: Path) -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    uncommented = [line[2:] if _COMMENTED_KEY.match(line) else line for line in lines]
    settings = load_settings(write(tmp_path / "all.toml", "\n".join(uncommented) + "\n"))
    assert settings.llm.temperature is not None
    assert settings.llm.max_tokens is not None


def test_example_comments_every_key_with_its_default() -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not (re.match(r"^[a-z_]+ = ", line) or _COMMENTED_KEY.match(line)):
            continue
        comment = []
        j = i - 1
        while j >= 0 and lines[j].startswith("#") and not _COMMENTED_KEY.match(lines[j]):
            comment.append(lines[j])
            j -= 1
        assert comment, f"no comment above line {i + 1}: {line}"
        assert any("Default" in c for c in comment), f"the comment above {line!r} names no default"


def test_example_top_comment_explains_environment_and_check_config() -> None:
    head = EXAMPLE.read_text(encoding="utf-8").split("\n\n", 1)[0]
    assert "BRIDGE_<SECTION>__<KEY>" in head
    assert "BRIDGE_LLM__API_KEY" in head
    assert "BRIDGE_TOOLS__ALLOW_PRIVATE_NETWORK=true" in head
    assert "bridge check-config --config config.toml" in head


# -- render_settings -------------------------------------------------------------------------

SECRET = "sk-test-DO-NOT-PRINT-4242"


def test_render_redacts_the_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_LLM__API_KEY", SECRET)
    settings = load_settings(EXAMPLE)
    assert settings.llm.api_key.get_secret_value() == SECRET
    rendered = render_settings(settings)
    assert SECRET not in rendered
    assert f'api_key = "{REDACTED}"' in rendered
    assert REDACTED == "<redacted>"


def test_render_shows_an_empty_key_as_empty() -> None:
    assert 'api_key = ""' in render_settings(Settings())


def test_render_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(
        tmp_path / "config.toml",
        """
owners = ["console:local", "telegram:42"]
log_level = "DEBUG"
[llm]
base_url = "http://127.0.0.1:9/v1"
temperature = 0.25
max_tokens = 512
[storage]
path = "state/bridge.db"
[tools]
timeouts = { webfetch = 20, "odd name" = 1.5 }
manifests = ["manifests"]
disabled = ["web"]
[agent]
system_prompt = "Quote \\"this\\", a backslash \\\\ and a tab\\there.\\nSecond line: ünïcødé."
timezone = "Europe/Berlin"
""",
    )
    (tmp_path / "manifests").mkdir()
    monkeypatch.setenv("BRIDGE_LLM__API_KEY", SECRET)
    original = load_settings(config)
    rendered = render_settings(original)
    assert SECRET not in rendered

    monkeypatch.delenv("BRIDGE_LLM__API_KEY")
    back = load_settings(write(tmp_path / "rendered.toml", rendered))
    assert back.llm.api_key == SecretStr(REDACTED)
    back.llm.api_key = original.llm.api_key
    assert back == original


def test_render_of_defaults_round_trips(tmp_path: Path) -> None:
    rendered = render_settings(Settings())
    assert "# base_url is unset" in rendered
    file = write(tmp_path / "rendered.toml", rendered)
    assert load_settings(file) == beside(file)


def test_render_escapes_every_control_character(tmp_path: Path) -> None:
    # TOML forbids raw control characters in strings, DEL (U+007F) included, which JSON leaves raw.
    awkward = "".join(chr(c) for c in range(0x20)) + '\x7f "quoted" \\ ünïcødé'
    original = beside(
        tmp_path / "rendered.toml", agent={"system_prompt": awkward}, tools={"timeouts": {"odd\x7fname": 2.0}}
    )
    back = load_settings(write(tmp_path / "rendered.toml", render_settings(original)))
    assert back.agent.system_prompt == awkward
    assert back == original


# -- [session] -------------------------------------------------------------------------------


def test_send_policy_rules_load_in_the_documented_shape(tmp_path: Path) -> None:
    settings = load_settings(
        write(
            tmp_path / "c.toml",
            """
[session.send_policy]
default = "deny"
rules = [
  { action = "allow", match = { key_prefix = "main" } },
  { action = "ignore", match = { surface = "discord", chat_type = "channel" } },
  { action = "deny" },
]
[session.agent_to_agent]
max_ping_pong_turns = 0
""",
        )
    )
    policy = settings.session.send_policy
    assert policy.default == "deny"
    assert [r.action for r in policy.rules] == ["allow", "ignore", "deny"]
    assert policy.rules[1].match.chat_type == "channel"
    assert policy.rules[2].match.surface is None
    assert settings.session.agent_to_agent.max_ping_pong_turns == 0


def test_a_bad_rule_is_named_by_its_position(tmp_path: Path) -> None:
    error = config_error(
        write(
            tmp_path / "c.toml",
            '[session.send_policy]\nrules = [{ action = "allow" }, '
            '{ action = "mute", match = { chat = "x" } }]\n',
        )
    )
    assert "session.send_policy.rules[1].action" in error
    assert "session.send_policy.rules[1].match.chat: unknown key" in error


def test_ping_pong_turns_are_limited_to_five(tmp_path: Path) -> None:
    error = config_error(write(tmp_path / "c.toml", "[session.agent_to_agent]\nmax_ping_pong_turns = 6\n"))
    assert "session.agent_to_agent.max_ping_pong_turns" in error


def test_a_nested_environment_variable_is_blamed_by_its_full_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_SESSION__SEND_POLICY__DEFAULT", "maybe")
    error = config_error()
    assert "environment variable BRIDGE_SESSION__SEND_POLICY__DEFAULT: session.send_policy.default" in error


def test_render_round_trips_send_policy_rules(tmp_path: Path) -> None:
    original = beside(
        tmp_path / "rendered.toml",
        session={
            "send_policy": {
                "default": "deny",
                "rules": [
                    {"action": "allow", "match": {"key_prefix": "main"}},
                    {"action": "deny", "match": {"surface": "discord", "chat_type": "group"}},
                    {"action": "ignore"},
                ],
            }
        },
    )
    rendered = render_settings(original)
    assert "[session.send_policy]" in rendered and "\n[session]\n" not in rendered
    assert load_settings(write(tmp_path / "rendered.toml", rendered)) == original


def test_the_old_agent_max_concurrent_runs_key_says_where_it_went(tmp_path: Path) -> None:
    error = config_error(write(tmp_path / "c.toml", "[agent]\nmax_concurrent_runs = 4\n"))
    assert "moved to [runs] max_concurrent_runs" in error


def test_runs_settings_are_checked(tmp_path: Path) -> None:
    error = config_error(write(tmp_path / "c.toml", '[runs]\nqueue_mode = "later"\nmax_queued = 0\n'))
    assert "runs.queue_mode" in error and "runs.max_queued" in error
