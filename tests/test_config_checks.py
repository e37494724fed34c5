"""Config checks: what `bridge run` would reject, `bridge check-config` rejects too, naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.config import known_surfaces
from bridge.config_io import load_settings
from tests.test_cli import Finished, assert_no_traceback, bridge


def write(tmp_path: Path, text: str) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(text, encoding="utf-8")
    return config


async def check(tmp_path: Path, config: Path) -> Finished:
    done = await bridge("check-config", "--config", str(config), cwd=tmp_path)
    assert_no_traceback(done)
    return done


# -- [tools] timeouts ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-5", "0", "-0.5"])
async def test_a_tool_timeout_that_is_not_positive_fails_naming_the_tool(tmp_path: Path, value: str) -> None:
    config = write(tmp_path, f"[tools]\ntimeouts = {{ webfetch = {value}, write_file = 10 }}\n")
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert "tools.timeouts.webfetch: Input should be greater than 0" in done.stderr
    assert "write_file" not in done.stderr


def test_positive_tool_timeouts_from_a_file_are_kept(tmp_path: Path) -> None:
    config = write(tmp_path, "[tools]\ntimeouts = { webfetch = 0.5 }\n")
    assert load_settings(config).tools.timeouts == {"webfetch": 0.5}


# -- a config file that is not UTF-8 ---------------------------------------------------------


async def test_a_config_file_that_is_not_utf8_is_a_clean_config_error(tmp_path: Path) -> None:
    config = tmp_path / "latin1.toml"
    config.write_bytes('[agent]\nsystem_prompt = "Réponds en français"\n'.encode("latin-1"))
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert done.stderr.startswith("bridge: config error:\n")
    assert str(config) in done.stderr and "not UTF-8" in done.stderr
    assert "0xe9" in done.stderr


# -- send-policy surfaces --------------------------------------------------------------------


async def test_a_rule_for_a_misspelt_surface_is_rejected_naming_the_key_and_the_known_ones(
    tmp_path: Path,
) -> None:
    config = write(
        tmp_path,
        "[session.send_policy]\n"
        'rules = [{ action = "allow", match = { surface = "discord" } },'
        ' { action = "deny", match = { surface = "telgram" } }]\n',
    )
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert (
        "session.send_policy.rules[1].match.surface: 'telgram' is not a known surface; "
        "known surfaces: console, discord, telegram"
    ) in done.stderr


def test_the_known_surfaces_are_the_installed_adapters_third_party_ones_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert {"console", "telegram", "discord"} <= set(known_surfaces())
    # A third-party package registering an adapter in the same entry-point group as ours.
    info = tmp_path / "bridge_matrix-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bridge-matrix\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[bridge.adapters]\nmatrix = bridge_matrix:MatrixAdapter\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "matrix" in known_surfaces()
    config = write(
        tmp_path, '[session.send_policy]\nrules = [{ action = "deny", match = { surface = "matrix" } }]\n'
    )
    assert load_settings(config).session.send_policy.rules[0].match.surface == "matrix"


# -- the tool registry: manifests and disabled names -------------------------------------------


async def test_check_config_rejects_a_manifest_that_fails_to_load(tmp_path: Path) -> None:
    manifest = tmp_path / "broken.json"
    manifest.write_text('[{"name": "half", ', encoding="utf-8")
    config = write(tmp_path, f"[tools]\nmanifests = [{json.dumps(str(manifest))}]\n")
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert done.stderr.startswith("bridge: config error:\ntools.manifests: ")
    assert str(manifest) in done.stderr and "not readable as JSON" in done.stderr
    assert done.stdout == ""


async def test_check_config_rejects_a_manifest_path_that_does_not_exist(tmp_path: Path) -> None:
    config = write(tmp_path, '[tools]\nmanifests = ["no-such-folder"]\n')
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert "tools.manifests: no-such-folder" in done.stderr


async def test_check_config_rejects_unknown_disabled_names_and_accepts_known_ones(tmp_path: Path) -> None:
    config = write(tmp_path, '[tools]\ndisabled = ["web", "wrte_file"]\n')
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert "tools.disabled: unknown tool or group name(s): wrte_file" in done.stderr

    config = write(tmp_path, '[tools]\ndisabled = ["web", "write_file"]\n')
    done = await check(tmp_path, config)
    assert done.code == 0, done.output
    assert 'disabled = ["web", "write_file"]' in done.stdout


# -- DM pairing ------------------------------------------------------------------------------


async def test_an_unknown_dm_policy_is_rejected_naming_the_key_and_the_choices(tmp_path: Path) -> None:
    config = write(tmp_path, '[telegram]\ndm_policy = "open"\n')
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert "telegram.dm_policy: Input should be 'allowlist' or 'pairing'" in done.stderr


async def test_pairing_beside_a_wildcard_allowlist_is_rejected_as_pointless(tmp_path: Path) -> None:
    config = write(tmp_path, '[discord]\ndm_policy = "pairing"\nallowed_users = ["*"]\n')
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert 'discord: dm_policy = "pairing" never asks for a code while allowed_users holds "*"' in done.stderr


async def test_a_code_lifetime_under_a_minute_is_rejected(tmp_path: Path) -> None:
    config = write(tmp_path, "[telegram]\npairing_code_ttl_s = 5\n")
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert "telegram.pairing_code_ttl_s: Input should be greater than or equal to 60" in done.stderr


def test_pairing_settings_load_per_platform(tmp_path: Path) -> None:
    config = write(tmp_path, '[telegram]\ndm_policy = "pairing"\npairing_code_ttl_s = 900\n')
    settings = load_settings(config)
    assert (settings.telegram.dm_policy, settings.telegram.pairing_code_ttl_s) == ("pairing", 900)
    assert settings.discord.dm_policy == "allowlist"
