"""Config checks: what `bridge run` would reject, `bridge check-config` rejects too, naming the key."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from bridge.config.io import load_settings
from bridge.config.platforms import known_surfaces
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
        "known surfaces: console, discord, matrix, slack, telegram"
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
    assert f"tools.manifests: {tmp_path / 'no-such-folder'}" in done.stderr  # from the config's folder


async def test_check_config_rejects_unknown_disabled_names_and_accepts_known_ones(tmp_path: Path) -> None:
    config = write(tmp_path, '[tools]\ndisabled = ["web", "wrte_file"]\n')
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert "tools.disabled: unknown tool or group name(s): wrte_file" in done.stderr

    config = write(tmp_path, '[tools]\ndisabled = ["web", "write_file"]\n')
    done = await check(tmp_path, config)
    assert done.code == 0, done.output
    assert 'disabled = ["web", "write_file"]' in done.stdout


# -- the tools that reach outside --------------------------------------------------------------


async def test_check_config_says_why_enabled_commands_cannot_run(tmp_path: Path) -> None:
    config = write(tmp_path, '[tools.exec]\nenabled = true\nbwrap = "/nonexistent/bwrap"\n')
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert done.stderr.startswith("bridge: config error:\ntools.exec: enabled, but commands cannot run: ")
    assert "/nonexistent/bwrap" in done.stderr


async def test_check_config_refuses_commands_in_a_workspace_that_holds_the_database(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        f'[storage]\npath = "{tmp_path}/data/bridge.db"\n[tools]\nworkspace = "{tmp_path}/data"\n'
        "[tools.exec]\nenabled = true\n",
    )
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert "tools.workspace: commands cannot run" in done.stderr
    assert "holds Bridge's own files" in done.stderr


async def test_check_config_names_the_search_keys_variable_never_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_BRAVE_KEY", "brave-secret-9931")
    config = write(tmp_path, '[tools.web_search]\nprovider = "brave"\napi_key_env = "MY_BRAVE_KEY"\n')
    done = await check(tmp_path, config)
    assert done.code == 0, done.output
    assert 'api_key_env = "MY_BRAVE_KEY"' in done.stdout
    assert "brave-secret-9931" not in done.output


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


# -- [[hooks]] ---------------------------------------------------------------------------------

HOOK_SECRET = "hook-secret-NEVER-SHOWN-5521"
ADMIN_ON = "[admin]\nenabled = true\n"


def hook_entry(name: str = "deploys", **fields: str) -> str:
    """One [[hooks]] table; `fields` add or replace its keys (values written as TOML strings)."""
    values = {"name": name, "secret": HOOK_SECRET, "deliver_to": "main", **fields}
    return "[[hooks]]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())


async def refused(tmp_path: Path, text: str) -> str:
    """check-config's stderr for a config it must refuse."""
    done = await check(tmp_path, write(tmp_path, text))
    assert done.code == 2, done.output
    assert done.stderr.startswith("bridge: config error:\n"), done.stderr
    assert done.stdout == ""
    return done.stderr


async def test_a_hook_secret_shorter_than_16_characters_is_refused_naming_the_key_without_showing_it(
    tmp_path: Path,
) -> None:
    stderr = await refused(tmp_path, ADMIN_ON + hook_entry(secret="tiny-s3cr3t"))
    assert "hooks[0].secret: must be at least 16 characters (e.g. `openssl rand -hex 24`)" in stderr
    assert "tiny-s3cr3t" not in stderr


async def test_a_secret_of_exactly_16_characters_is_accepted(tmp_path: Path) -> None:
    done = await check(tmp_path, write(tmp_path, ADMIN_ON + hook_entry(secret="x" * 16)))
    assert done.code == 0, done.output


async def test_the_key_of_a_bad_hook_names_its_place_in_the_array(tmp_path: Path) -> None:
    stderr = await refused(
        tmp_path, ADMIN_ON + hook_entry("good") + hook_entry("second", secret="tiny-s3cr3t")
    )
    assert "hooks[1].secret: must be at least 16 characters" in stderr
    assert "hooks[0]" not in stderr


@pytest.mark.parametrize("name", ["Deploys!", "Deploys", "-deploys", "de ploys", "x" * 65])
async def test_a_hook_name_that_cannot_be_a_url_path_is_refused(tmp_path: Path, name: str) -> None:
    stderr = await refused(tmp_path, ADMIN_ON + hook_entry(name))
    assert f"hooks[0].name: {name!r} is not a hook name: a-z, 0-9, _ and - (up to 64)" in stderr


async def test_a_deliver_to_that_is_not_a_session_key_is_refused_with_the_key_error(tmp_path: Path) -> None:
    stderr = await refused(tmp_path, ADMIN_ON + hook_entry(deliver_to="the ops room"))
    assert "hooks[0].deliver_to: invalid session key 'the ops room': it contains whitespace" in stderr

    stderr = await refused(tmp_path, ADMIN_ON + hook_entry(deliver_to="telegram:room:-100"))
    assert "hooks[0].deliver_to: invalid session key 'telegram:room:-100': unknown scope 'room'" in stderr


@pytest.mark.parametrize("target", ["cron:nightly", "hook:deploys", "node-laptop"])
async def test_a_deliver_to_that_names_no_chat_is_refused(tmp_path: Path, target: str) -> None:
    stderr = await refused(tmp_path, ADMIN_ON + hook_entry(deliver_to=target))
    assert (
        f"hooks[0].deliver_to: {target!r} is no chat: give the session key of a chat, e.g. 'main'" in stderr
    )


async def test_a_prompt_with_an_unknown_placeholder_is_refused_naming_it_and_the_known_ones(
    tmp_path: Path,
) -> None:
    stderr = await refused(tmp_path, ADMIN_ON + hook_entry(prompt="New release {{body.tag}} by {{sender}}"))
    assert (
        "hooks[0].prompt: {{sender}} is not a placeholder; there are {{body}}, {{body.some.field}}" in stderr
    )
    assert "{{hook}} and {{event_id}}" in stderr


@pytest.mark.parametrize("session", ["weird", "cron:abc", "main", "hook:"])
async def test_a_session_that_is_neither_mode_nor_hook_key_is_refused(tmp_path: Path, session: str) -> None:
    stderr = await refused(tmp_path, ADMIN_ON + hook_entry(session=session))
    assert (
        f"hooks[0].session: {session!r}: use 'per_event', 'fixed' or a key such as 'hook:deploys'" in stderr
    )


async def test_a_bad_id_field_is_refused(tmp_path: Path) -> None:
    stderr = await refused(tmp_path, ADMIN_ON + hook_entry(id_field="release id"))
    assert "hooks[0].id_field: 'release id' is not a field path such as 'id' or 'release.id'" in stderr


async def test_two_hooks_with_one_name_are_refused(tmp_path: Path) -> None:
    text = ADMIN_ON + hook_entry("deploys") + hook_entry("deploys", deliver_to="telegram:group:-100")
    stderr = await refused(tmp_path, text)
    assert "hooks: two entries are named 'deploys': each name is one URL, /hooks/<name>" in stderr


async def test_hooks_without_a_server_to_take_them_are_refused_saying_how_to_fix_it(tmp_path: Path) -> None:
    stderr = await refused(tmp_path, hook_entry())
    assert "hooks: webhooks are served by the admin server or by the Telegram webhook's server" in stderr
    assert "set [admin] enabled = true" in stderr
    # The Telegram advice is whole: a webhook only serves them on a bot that runs.
    assert '[telegram] enabled = true, mode = "webhook"' in stderr
    # A Telegram bot that polls does not serve them either.
    polling = '[telegram]\nenabled = true\ntoken = "123:abc"\n'
    stderr = await refused(tmp_path, polling + hook_entry())
    assert "neither is on" in stderr


TELEGRAM_WEBHOOK = (
    '[telegram]\nenabled = true\ntoken = "123:abc"\nmode = "webhook"\n'
    'webhook_url = "https://bot.example.com/telegram"\nwebhook_secret = "abcdefabcdefabcdef"\n'
)


async def test_hooks_are_accepted_behind_the_telegram_webhook_or_when_all_are_disabled(
    tmp_path: Path,
) -> None:
    done = await check(tmp_path, write(tmp_path, TELEGRAM_WEBHOOK + hook_entry()))
    assert done.code == 0, done.output
    done = await check(tmp_path, write(tmp_path, hook_entry() + "enabled = false\n"))
    assert done.code == 0, done.output


async def test_a_valid_hook_is_printed_with_its_secret_redacted(tmp_path: Path) -> None:
    entry = hook_entry(
        deliver_to="telegram:group:-100",
        prompt="Deployed {{body.ref}} via {{hook}}",
        session="fixed",
        id_field="delivery.id",
    )
    done = await check(tmp_path, write(tmp_path, ADMIN_ON + entry))
    assert done.code == 0, done.output
    assert HOOK_SECRET not in done.output
    (hook,) = tomllib.loads(done.stdout)["hooks"]
    assert hook == {
        "name": "deploys",
        "secret": "<redacted>",
        "deliver_to": "telegram:group:-100",
        "prompt": "Deployed {{body.ref}} via {{hook}}",
        "session": "fixed",
        "id_field": "delivery.id",
        "max_age_s": 300,
        "require_timestamp": True,
        "max_body_bytes": 65536,
        "enabled": True,
    }


# -- [skills] --------------------------------------------------------------------------------


def skill_md(folder: Path, front: str, body: str = "Steps.\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    return folder / "SKILL.md"


async def test_check_config_reports_malformed_skills_naming_the_key_each_file_and_why(tmp_path: Path) -> None:
    skill_md(tmp_path / "skills" / "good", "name: good\ndescription: Fine.\n")
    skill_md(tmp_path / "skills" / "bad-yaml", "name: [bad\ndescription: x\n")
    skill_md(tmp_path / "skills" / "nameless", "description: x\n")
    config = write(tmp_path, '[skills]\npaths = ["skills"]\n')
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    assert done.stderr.startswith("bridge: config error:\n")
    lines = done.stderr.splitlines()[1:]
    assert len(lines) == 2, done.stderr
    assert lines[0].startswith(
        f"{config}: skills.paths: {tmp_path}/skills/bad-yaml/SKILL.md: the front matter is not valid YAML"
    )
    assert (
        lines[1]
        == f"{config}: skills.paths: {tmp_path}/skills/nameless/SKILL.md: the front matter has no name"
    )
    assert done.stdout == ""


async def test_check_config_refuses_two_skills_of_one_name_and_a_path_that_is_no_folder(
    tmp_path: Path,
) -> None:
    skill_md(tmp_path / "a" / "notes", "name: notes\ndescription: One.\n")
    skill_md(tmp_path / "b" / "notes", "name: notes\ndescription: Two.\n")
    config = write(tmp_path, '[skills]\npaths = ["a", "b", "nowhere"]\n')
    done = await check(tmp_path, config)
    assert done.code == 2, done.output
    taken = (
        f"skills.paths: {tmp_path}/b/notes/SKILL.md: the name 'notes' is taken by {tmp_path}/a/notes/SKILL.md"
    )
    assert taken in done.stderr
    assert f"skills.paths: {tmp_path}/nowhere: no such folder" in done.stderr


async def test_check_config_accepts_valid_skills_and_prints_their_paths(tmp_path: Path) -> None:
    skill_md(tmp_path / "skills" / "notes", "name: notes\ndescription: Take notes.\nlicense: MIT\n")
    (tmp_path / "skills" / "assets").mkdir()  # no SKILL.md: not a skill, and no error
    done = await check(tmp_path, write(tmp_path, '[skills]\npaths = ["skills"]\n'))
    assert done.code == 0, done.output
    assert tomllib.loads(done.stdout)["skills"] == {"paths": [str(tmp_path / "skills")]}
