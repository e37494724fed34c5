"""[mcp] and [[mcp.servers]]: what a malformed entry is told, and that servers' secrets stay secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.app.registry import build_registry
from bridge.errors import ConfigError
from bridge.logs import secret_values
from tests.mcp.conftest import mcp_settings
from tests.test_cli import bridge


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x", "description": "d"}, "set either `command`"),
        ({"name": "x", "description": "d", "command": "a", "url": "http://h/"}, "set either `command`"),
        ({"name": "Bad Name", "description": "d", "command": "a"}, "1-32 characters"),
        ({"name": "x", "description": " ", "command": "a"}, "few words"),
        ({"name": "x", "description": "d", "url": "ftp://h"}, "not an http"),
        ({"name": "x", "description": "d", "url": "http://h/", "env": {"A": "b"}}, "for a `command` server"),
        (
            {"name": "x", "description": "d", "command": "a", "env": {"A": "${NOT_SET_ANYWHERE_42}"}},
            "not set",
        ),
        ({"name": "x", "description": "d", "command": "a", "timeoutt_s": 3}, "timeoutt_s"),
    ],
)
def test_a_malformed_server_entry_names_the_key_and_the_reason(
    tmp_path: Path, entry: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match="mcp") as raised:
        mcp_settings(tmp_path, entry)
    assert message in str(raised.value)


def test_a_server_named_like_a_built_in_group_is_refused(tmp_path: Path) -> None:
    settings = mcp_settings(tmp_path, {"name": "files", "description": "d", "command": "a"})
    with pytest.raises(ConfigError, match=r"mcp.servers: 'files' is already the name of a tool group"):
        build_registry(settings)


def test_two_servers_with_one_name_are_refused(tmp_path: Path) -> None:
    entry = {"name": "x", "description": "d", "command": "a"}
    with pytest.raises(ValueError, match="two servers are named 'x'"):
        mcp_settings(tmp_path, entry, entry)


def test_tools_disabled_accepts_mcp_tool_names_only_where_a_server_could_hold_them(tmp_path: Path) -> None:
    entry = {"name": "fs", "description": "d", "command": "a"}
    build_registry(mcp_settings(tmp_path, entry, tools={"disabled": ["fs__delete", "delete_file"]}))
    with pytest.raises(ConfigError, match="other__delete"):
        build_registry(mcp_settings(tmp_path, entry, tools={"disabled": ["other__delete"]}))
    with pytest.raises(ConfigError, match="delete_file"):
        build_registry(mcp_settings(tmp_path, tools={"disabled": ["delete_file"]}))


async def test_check_config_and_the_log_redactor_hide_a_servers_env_and_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GH_TOKEN_FOR_TEST", "ghp_from-the-environment-1234")
    config = tmp_path / "config.toml"
    config.write_text(
        '[[mcp.servers]]\nname = "gh"\ndescription = "GitHub"\nurl = "https://example.com/mcp"\n'
        'headers = { Authorization = "Bearer ${GH_TOKEN_FOR_TEST}" }\n'
        '[[mcp.servers]]\nname = "fs"\ndescription = "Files"\ncommand = "npx"\n'
        'env = { API_TOKEN = "tok-very-secret-98765" }\n',
        encoding="utf-8",
    )
    done = await bridge(
        "check-config", "--config", str(config), cwd=tmp_path, GH_TOKEN_FOR_TEST="ghp_x-12345678"
    )
    assert done.code == 0, done.output
    assert "tok-very-secret-98765" not in done.output
    assert "ghp_x-12345678" not in done.output
    assert '"API_TOKEN" = "<redacted>"' in done.stdout
    settings = mcp_settings(
        tmp_path,
        {"name": "fs", "description": "d", "command": "a", "env": {"API_TOKEN": "tok-very-secret-98765"}},
        {"name": "gh", "description": "d", "url": "http://h/", "headers": {"X": "${GH_TOKEN_FOR_TEST}"}},
    )
    secrets = set(secret_values(settings))
    assert {"tok-very-secret-98765", "ghp_from-the-environment-1234"} <= secrets
