"""[llm.profiles.NAME] and [llm] fallback: validation that names the key, merging, check-config, secrets."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bridge.cli import main
from bridge.cli.exits import EXIT_CONFIG
from bridge.config import Settings
from bridge.config.io import load_settings, render_settings
from bridge.errors import ConfigError
from bridge.logs import secret_values

KEY = "sk-profile-DO-NOT-PRINT-9137"


# No BRIDGE_* variable of the outer environment and no ./config.toml of the repo leaks in.
pytestmark = pytest.mark.usefixtures("isolated_config")


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[llm]\nbase_url = "http://127.0.0.1:8080/v1"\nmodel = "small"\n{text}', encoding="utf-8"
    )
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(config(tmp_path, text))
    return str(caught.value)


# -- validation ----------------------------------------------------------------------------------


def test_profiles_load_from_tables(tmp_path: Path) -> None:
    settings = load_settings(
        config(
            tmp_path,
            'fallback = "local"\n'
            '[llm.profiles.local]\nbase_url = "http://127.0.0.1:18080/v1"\nmodel = "qwen"\n'
            'tool_mode = "text"\n'
            '[llm.profiles.big-1]\nmodel = "gpt-4o"\napi_key_env = "BIG_KEY"\n',
        )
    )
    assert settings.llm.profile_names() == ["default", "big-1", "local"]
    assert settings.llm.fallback == "local"
    assert settings.llm.profiles["local"].tool_mode == "text"


def test_a_profile_sees_images_only_when_it_says_so_whatever_llm_says(tmp_path: Path) -> None:
    settings = load_settings(
        config(
            tmp_path,
            'vision = true\n[llm.profiles.text]\nmodel = "small"\n'
            '[llm.profiles.eyes]\nmodel = "big"\nvision = true\n',
        )
    )
    assert settings.llm.vision is True
    assert settings.llm.for_profile("text").vision is False
    assert settings.llm.for_profile("eyes").vision is True


def test_a_fallback_that_names_no_profile_is_named(tmp_path: Path) -> None:
    message = error_of(tmp_path, 'fallback = "backup"\n[llm.profiles.local]\nmodel = "qwen"\n')
    assert "llm.fallback: 'backup' is not a profile; defined profiles: default, local" in message


def test_a_bad_profile_name_is_named(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[llm.profiles.Big]\nmodel = "gpt-4o"\n')
    assert "llm.profiles: 'Big' is not a profile name" in message


def test_default_is_reserved_for_llm_itself(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[llm.profiles.default]\nmodel = "gpt-4o"\n')
    assert "llm.profiles: 'default' is reserved" in message


def test_a_bad_tool_mode_is_named_by_its_profile(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[llm.profiles.local]\nmodel = "qwen"\ntool_mode = "json"\n')
    assert "llm.profiles.local.tool_mode:" in message and "'native' or 'text'" in message


def test_a_profile_needs_a_model(tmp_path: Path) -> None:
    assert "llm.profiles.local.model: Field required" in error_of(tmp_path, "[llm.profiles.local]\n")


def test_a_key_written_in_a_profile_is_refused_with_where_it_goes(tmp_path: Path) -> None:
    message = error_of(tmp_path, f'[llm.profiles.big]\nmodel = "gpt-4o"\napi_key = "{KEY}"\n')
    assert "llm.profiles.big: api_key: a profile's key is never written in the config" in message
    assert "api_key_env" in message and KEY not in message


def test_api_key_env_must_be_a_variable_name(tmp_path: Path) -> None:
    message = error_of(tmp_path, f'[llm.profiles.big]\nmodel = "gpt-4o"\napi_key_env = "{KEY}"\n')
    assert "llm.profiles.big.api_key_env:" in message and "not an environment variable name" in message


def test_profiles_can_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_LLM__PROFILES__FAST__MODEL", "gpt-4o")
    monkeypatch.setenv("BRIDGE_LLM__FALLBACK", "fast")
    settings = load_settings(None)
    assert settings.llm.profiles["fast"].model == "gpt-4o" and settings.llm.fallback == "fast"


# -- merging over [llm] --------------------------------------------------------------------------


def test_a_profile_takes_what_it_leaves_out_from_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIG_KEY", KEY)
    settings = Settings(
        llm={
            "base_url": "http://127.0.0.1:8080/v1",
            "api_key": "sk-main-key-1234",
            "timeout_s": 12,
            "temperature": 0.3,
            "tool_mode": "text",
            "profiles": {
                "same": {"model": "other-model", "max_retries": 0},
                "big": {
                    "model": "gpt-4o",
                    "base_url": "https://api.example.com/v1",
                    "api_key_env": "BIG_KEY",
                },
                "local": {"model": "qwen", "base_url": "http://127.0.0.1:18080/v1", "tool_mode": "native"},
                "claude": {"model": "claude-x", "provider": "anthropic"},
            },
        }
    )
    same = settings.llm.for_profile("same")
    assert (same.model, same.max_retries, same.timeout_s, same.temperature) == ("other-model", 0, 12, 0.3)
    assert same.tool_mode == "text" and same.base_url == "http://127.0.0.1:8080/v1"
    # The same server: [llm]'s key goes with it.
    assert same.api_key.get_secret_value() == "sk-main-key-1234"
    big = settings.llm.for_profile("big")
    assert big.api_key.get_secret_value() == KEY and big.base_url == "https://api.example.com/v1"
    # Another server and no key of its own: no key, never [llm]'s.
    local = settings.llm.for_profile("local")
    assert local.api_key.get_secret_value() == "" and local.tool_mode == "native"
    # Another provider: not [llm]'s server either (its own default URL).
    claude = settings.llm.for_profile("claude")
    assert claude.provider == "anthropic" and claude.base_url is None
    assert claude.api_key.get_secret_value() == ""
    assert settings.llm.for_profile("default") is settings.llm


# -- check-config and secrets --------------------------------------------------------------------

PROFILES = '[llm.profiles.big]\nmodel = "gpt-4o"\napi_key_env = "BIG_KEY"\n'


def test_check_config_reports_a_key_variable_that_is_not_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-config", "--config", str(config(tmp_path, PROFILES))]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "llm.profiles.big.api_key_env: the environment variable BIG_KEY is not set" in err


def test_loading_does_not_fail_for_a_key_variable_that_is_not_set(tmp_path: Path) -> None:
    # `bridge run` starts (and warns); only that profile fails when a chat uses it.
    settings = load_settings(config(tmp_path, PROFILES))
    assert settings.llm.profiles["big"].key_missing


def test_check_config_never_prints_a_profile_key_and_its_output_loads_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIG_KEY", KEY)
    path = config(tmp_path, 'fallback = "big"\n' + PROFILES)
    assert main(["check-config", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert KEY not in out
    rendered = tomllib.loads(out)
    assert rendered["llm"]["profiles"] == {"big": {"model": "gpt-4o", "api_key_env": "BIG_KEY"}}
    assert rendered["llm"]["fallback"] == "big"


def test_render_round_trips_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIG_KEY", KEY)
    original = load_settings(config(tmp_path, 'fallback = "big"\n' + PROFILES))
    rendered = render_settings(original)
    assert "[llm.profiles.big]" in rendered and KEY not in rendered
    back_path = tmp_path / "rendered.toml"
    back_path.write_text(rendered, encoding="utf-8")
    back = load_settings(back_path)
    assert back.llm.profiles == original.llm.profiles and back.llm.fallback == "big"


def test_a_profile_key_is_a_secret_for_logs_and_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIG_KEY", KEY)
    settings = Settings(llm={"profiles": {"big": {"model": "gpt-4o", "api_key_env": "BIG_KEY"}}})
    assert KEY in set(secret_values(settings))
    assert KEY not in repr(settings) and KEY not in str(settings.model_dump())
