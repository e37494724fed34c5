"""Paths and the admin token from any folder: relative paths in a config file are taken from its
folder, and `bridge admin` / `bridge health` find a running bot's token through `--config` alone. The
token a start makes is kept (owner-only) across restarts, so a dashboard login survives one, and
`bridge admin --rotate-token` replaces it."""

from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path

import httpx
import pytest

from bridge.config.io import load_settings
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import bridge_running
from tests.pg import free_port
from tests.test_cli import assert_no_traceback, bridge

OWNER = 42


def relative_config(folder: Path, extra: str = "") -> Path:
    """A config.toml in FOLDER whose paths are all relative (the defaults, or `extra`'s)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.toml"
    config.write_text(extra, encoding="utf-8")
    return config


def run_config(folder: Path, tg: FakeTelegram, llm: FakeOpenAI, port: int) -> Path:
    """`bridge run` on the fake Bot API with the admin server on PORT, [storage] path left at its
    relative default ("data/bridge.db")."""
    return relative_config(
        folder,
        f'owners = ["telegram:{OWNER}"]\n'
        f'[llm]\nbase_url = "{llm.base_url}"\nmodel = "fake"\nmax_retries = 0\n'
        f'[telegram]\nenabled = true\ntoken = "{tg.token}"\napi_base = "{tg.api_base}"\npoll_timeout_s = 1\n'
        f"[admin]\nenabled = true\nport = {port}\n",
    )


async def serving(tg: FakeTelegram, port: int, within: float = 30.0) -> None:
    """Wait until the bot polls the fake Bot API and its admin server answers (401 without a token)."""
    await tg.wait_for(lambda: tg.open_polls > 0, timeout=within)
    deadline = time.monotonic() + within
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        while True:
            try:
                await client.get(f"http://127.0.0.1:{port}/healthz")
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the admin server on port {port} did not answer") from None
                await asyncio.sleep(0.05)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_relative_paths_are_taken_from_the_config_files_folder(tmp_path: Path) -> None:
    conf, elsewhere = tmp_path / "conf", tmp_path / "elsewhere"
    elsewhere.mkdir()
    relative_config(conf, '[storage]\npath = "state/bridge.db"\n[tools]\nmanifests = ["tools"]\n')
    (conf / "tools").mkdir()  # checked at load: found beside the config, not in the working directory
    # --config itself is relative to the working directory, as any command-line path is.
    done = await bridge("check-config", "--config", "../conf/config.toml", cwd=elsewhere)
    assert done.code == 0, done.output
    assert f'path = "{conf / "state" / "bridge.db"}"' in done.stdout
    assert f'workspace = "{conf / "data" / "workspace"}"' in done.stdout  # a default, relative too
    assert f'manifests = ["{conf / "tools"}"]' in done.stdout
    assert 'executable = "/usr/bin/chromium"' in done.stdout  # an absolute path wins

    # A relative path from the environment is taken from the config's folder as well...
    env = await bridge(
        "check-config", "--config", str(conf / "config.toml"), cwd=elsewhere, BRIDGE_STORAGE__PATH="env/x.db"
    )
    assert f'path = "{conf / "env" / "x.db"}"' in env.stdout, env.output
    # ...and with no config file at all, from the working directory, as before.
    bare = await bridge("check-config", cwd=elsewhere)
    assert 'path = "data/bridge.db"' in bare.stdout, bare.output


@pytest.mark.usefixtures("isolated_config")  # no BRIDGE_* variable; the working directory is tmp_path
def test_skills_folders_are_read_from_the_config_files_folder(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "skills" / "notes").mkdir(parents=True)
    (conf / "skills" / "notes" / "SKILL.md").write_text(
        "---\nname: notes\ndescription: Notes.\n---\nSteps.\n"
    )
    config = relative_config(conf, '[skills]\npaths = ["skills"]\n')
    assert not (tmp_path / "skills").exists()
    settings = load_settings(config)
    # Read while the config loads, so the folder is resolved before [skills] looks into it.
    assert settings.skills.paths == [conf / "skills"]
    assert settings.skills.catalog.names() == ["notes"]


async def test_run_admin_and_health_from_other_folders_share_the_data_beside_the_config(
    tmp_path: Path,
) -> None:
    conf, elsewhere, third = tmp_path / "conf", tmp_path / "elsewhere", tmp_path / "third"
    elsewhere.mkdir()
    third.mkdir()
    port = free_port()
    async with FakeOpenAI() as llm, FakeTelegram() as tg:
        config = run_config(conf, tg, llm, port)
        token_file = conf / "data" / "admin.token"
        async with bridge_running(elsewhere, Path("../conf/config.toml")):
            await serving(tg, port)
            assert (conf / "data" / "bridge.db").is_file()
            assert not (elsewhere / "data").exists()
            assert mode(token_file) == 0o600
            token = token_file.read_text().strip()

            health = await bridge("health", "--config", str(config), cwd=third)
            assert health.code == 0, health.output
            shown = await bridge("admin", "--config", str(config), cwd=third)
            assert shown.code == 0, shown.output
            assert token in shown.stdout and str(token_file) in shown.stdout
            assert_no_traceback(shown)

            # A dashboard login, to be tried again after the restart.
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as browser:
                login = await browser.post("/login", data={"token": token, "next": "/"})
                assert login.status_code == 303, login.text
                cookies = dict(browser.cookies)
                assert cookies

        # Restarted from yet another folder: the same token, still owner-only, and the login holds.
        async with bridge_running(third, config):
            await serving(tg, port)
            assert token_file.read_text().strip() == token
            assert mode(token_file) == 0o600
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", cookies=cookies, trust_env=False
            ) as browser:
                page = await browser.get("/api/sessions")
                assert page.status_code == 200, page.text

            rotated = await bridge("admin", "--rotate-token", "--config", str(config), cwd=elsewhere)
            assert rotated.code == 0, rotated.output
            new = token_file.read_text().strip()
            assert new != token and new in rotated.stdout
            assert "Restart `bridge run`" in rotated.stdout
            assert mode(token_file) == 0o600

        async with bridge_running(elsewhere, config):
            await serving(tg, port)
            health = await bridge("health", "--config", str(config), cwd=third)
            assert health.code == 0, health.output  # the rotated token is the one in use now
            assert token_file.read_text().strip() == new


async def test_health_without_any_token_says_where_it_looked(tmp_path: Path) -> None:
    conf, elsewhere = tmp_path / "conf", tmp_path / "elsewhere"
    elsewhere.mkdir()
    config = relative_config(conf, f"[admin]\nenabled = true\nport = {free_port()}\n")
    done = await bridge("health", "--config", str(config), cwd=elsewhere)
    assert done.code == 1
    assert_no_traceback(done)
    assert str(conf / "data" / "admin.token") in done.stdout
    assert "[admin] token" in done.stdout and "BRIDGE_ADMIN__TOKEN" in done.stdout
    assert "Bearer" not in done.output  # nothing was sent, least of all an empty "Bearer " header


async def test_rotate_token_refuses_a_configured_token(tmp_path: Path) -> None:
    config = relative_config(tmp_path, '[admin]\nenabled = true\ntoken = "a-token-of-the-operator-0123"\n')
    done = await bridge("admin", "--rotate-token", "--config", str(config), cwd=tmp_path)
    assert done.code == 1
    assert "[admin] token" in done.stdout
    assert not (tmp_path / "data" / "admin.token").exists()
