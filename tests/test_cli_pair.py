"""`bridge pair list | approve | revoke` on a bot's database (the running-bot case is in
tests/adapters/test_telegram_pairing.py)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from bridge.cli import main
from bridge.config.io import load_settings
from bridge.events import Inbound
from bridge.gateway.pairing import Pairing
from bridge.store.backends import store_for
from tests.test_cli import write_config


def strangers_write(config: Path, *users: tuple[str, str]) -> list[str]:
    """Strangers (surface, user id) DM a bot on this config's database; the codes they were given."""

    async def write() -> list[str]:
        store = store_for(load_settings(config).storage)
        await store.open()
        try:
            pairing = Pairing(store)
            for surface, user in users:
                inbound = Inbound(surface, "dm", f"chat-{user}", user, "hi", sender_name=f"Name {user}")
                await pairing.admit(inbound, ttl_s=3600)
            by_user = {(p.surface, p.user_id): p.code for p in await pairing.pending()}
            return [by_user[person] for person in users]
        finally:
            await store.close()

    (config.parent / "state").mkdir(exist_ok=True)
    return asyncio.run(write())


def pair(config: Path, *args: str) -> int:
    return main(["pair", *args, "--config", str(config)])


def test_list_approve_and_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, None)
    ann, bob = strangers_write(config, ("telegram", "777"), ("discord", "888"))

    assert pair(config, "list") == 0
    out = capsys.readouterr().out
    assert re.search(
        rf"^{ann}\s+telegram:777\s+Name 777\s+\d{{4}}-\d\d-\d\d \d\d:\d\d \(in 60 min\)$", out, re.M
    )
    assert re.search(rf"^{bob}\s+discord:888\s+Name 888\s", out, re.M)
    approved = out.split("Approved (bridge pair revoke SURFACE:USER_ID):\n")[1]
    assert approved.splitlines()[1:] == ["(none)"]

    assert pair(config, "approve", bob.lower()) == 0
    assert capsys.readouterr().out == "approved discord user 888 (Name 888): they can DM the bot now\n"
    assert pair(config, "list") == 0
    out = capsys.readouterr().out
    assert bob not in out
    assert re.search(r"^discord:888\s+Name 888\s+\d{4}-\d\d-\d\d \d\d:\d\d\s+cli$", out, re.M)

    assert pair(config, "revoke", "discord:888") == 0
    assert "revoked discord:888" in capsys.readouterr().out
    assert pair(config, "revoke", "discord", "888") == 1
    assert "discord:888 is not approved" in capsys.readouterr().err
    assert pair(config, "list") == 0
    assert "discord:888" not in capsys.readouterr().out


def test_a_wrong_code_is_refused_and_approves_nobody(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, None)
    [code] = strangers_write(config, ("telegram", "777"))
    wrong = "ABCD-EFGH" if code != "ABCD-EFGH" else "HGFE-DCBA"
    assert pair(config, "approve", wrong) == 1
    assert f"no code '{wrong}' is waiting (wrong, or expired)" in capsys.readouterr().err
    assert pair(config, "list") == 0
    assert code in capsys.readouterr().out


def test_revoke_needs_a_surface_and_a_user_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, None)
    for bad in (["777"], ["telegram:"], ["a", "b", "c"]):
        assert pair(config, "revoke", *bad) == 2
        assert "is not SURFACE:USER_ID (e.g. telegram:777)" in capsys.readouterr().err


def test_without_a_database_it_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, None)
    assert pair(config, "list") == 1
    assert f"no database at {tmp_path / 'state' / 'bridge.db'}" in capsys.readouterr().err
