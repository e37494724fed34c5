"""The admin token a start makes when none is configured: made once, owner-only, and kept."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from bridge.http.auth import AdminAuth, admin_token, read_token, token_file, write_token
from tests.harness import make_settings


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_token_made_at_the_first_start_is_kept_by_the_next(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1", admin={"enabled": True})
    first, path = admin_token(settings)
    assert path == token_file(settings) == tmp_path / "admin.token"
    assert mode(path) == 0o600 and len(first) >= 32
    again, _ = admin_token(settings)
    assert again == first
    # The login cookie derives from the token, so it is the same after a restart.
    assert AdminAuth(again).session == AdminAuth(first).session


def test_an_empty_token_file_is_replaced(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1", admin={"enabled": True})
    token_file(settings).write_text("\n")
    made, path = admin_token(settings)
    assert made and path is not None and path.read_text().strip() == made
    assert mode(path) == 0o600


def test_a_token_file_others_can_read_is_made_owner_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1", admin={"enabled": True})
    path = token_file(settings)
    path.write_text("kept-token-of-some-length-0123456789\n")
    os.chmod(path, 0o644)
    with caplog.at_level(logging.WARNING, logger="bridge.http.auth"):
        token, _ = admin_token(settings)
    assert token == "kept-token-of-some-length-0123456789"
    assert mode(path) == 0o600
    assert str(path) in caplog.text


def test_write_token_replaces_the_file_owner_only_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1", admin={"enabled": True})
    first, path = admin_token(settings)
    assert path is not None
    rotated = write_token(path)
    assert rotated != first and read_token(settings) == rotated
    assert mode(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir() if "admin.token" in p.name) == ["admin.token"]


def test_a_configured_token_writes_no_file(tmp_path: Path) -> None:
    token = "a-token-of-the-operator-0123456789"
    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1", admin={"enabled": True, "token": token})
    assert admin_token(settings) == (token, None)
    assert not token_file(settings).exists()
