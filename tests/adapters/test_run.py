"""`bridge run` as a real process (Telegram, and Telegram with Discord), webhooks, failing sends."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import start_bridge
from tests.adapters.conftest import DISCORD_OWNER, OWNER, RigFactory
from tests.fakes.discord_api import FakeDiscord

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


def write_config(tmp_path: Path, text: str) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(text, encoding="utf-8")
    return config


async def sigterm(process: asyncio.subprocess.Process) -> tuple[str, float]:
    """Send SIGTERM; return stderr and how long the process took to exit (at most 5 s)."""
    process.send_signal(signal.SIGTERM)
    loop = asyncio.get_running_loop()
    started = loop.time()
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=5)
    return stderr.decode(), loop.time() - started


async def reap(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
        await process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_webhook_mode_checks_the_secret_token_on_every_request(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/telegram-hook"
    fake_llm.push(fake.text("via webhook"))
    async with rig(fake_llm, mode="webhook", webhook_url=url, port=port, webhook_secret="s3cret-token") as r:
        assert tg.webhook is not None and tg.webhook["url"] == url
        assert tg.webhook["secret_token"] == "s3cret-token"
        message = tg.dm(OWNER, "hello over a webhook")
        update = {"update_id": 900001, "message": message}
        async with aiohttp.ClientSession() as http:
            async with http.post(url, json=update, headers={SECRET_HEADER: "wrong"}) as refused:
                assert refused.status == 403
            async with http.post(url, json=update) as missing:
                assert missing.status == 403
            async with http.post(url, json=update, headers={SECRET_HEADER: "s3cret-token"}) as accepted:
                assert accepted.status == 200
        [reply] = await r.sent_to(OWNER, 1)
    assert reply["text"] == "via webhook"
    assert len(fake_llm.requests) == 1


async def test_a_send_that_keeps_failing_is_logged_and_the_bot_carries_on(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.push(fake.text("lost to the network"), fake.text("this one arrives"))
    # Whole replies: the failures aim at the reply's own sendMessage.
    async with rig(fake_llm, stream=False) as r:
        tg.fail_next("sendMessage", "502", times=5)
        tg.dm(OWNER, "first")
        await tg.wait_for(lambda: sum(1 for c in tg.calls if c[0] == "sendmessage") >= 5)
        tg.dm(OWNER, "second")
        [reply] = await r.sent_to(OWNER, 1)
    assert reply["text"] == "this one arrives"
    assert any(rec.levelno == logging.ERROR and "sending reply" in rec.getMessage() for rec in caplog.records)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM")
async def test_bridge_run_answers_on_telegram_and_stops_on_sigterm_within_five_seconds(
    tmp_path: Path, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("from a real process"))
    config = write_config(
        tmp_path,
        f'owners = ["telegram:{OWNER}"]\n'
        f'[llm]\nbase_url = "{fake_llm.base_url}"\nmodel = "fake"\nmax_retries = 0\n'
        f'[storage]\npath = "{tmp_path / "bridge.db"}"\n'
        f'[telegram]\nenabled = true\ntoken = "{tg.token}"\napi_base = "{tg.api_base}"\npoll_timeout_s = 5\n',
    )
    process = await start_bridge(tmp_path, "run", "--config", str(config))
    try:
        tg.dm(OWNER, "are you there?")
        await tg.wait_for(lambda: len(tg.messages_in(OWNER)) >= 1, timeout=30)
        # A long poll is open now: SIGTERM must not wait for it to run out.
        await tg.wait_for(lambda: tg.open_polls >= 1, timeout=10)
        stderr, elapsed = await sigterm(process)
    finally:
        await reap(process)
    assert process.returncode == 0, stderr
    assert elapsed < 5
    assert tg.messages_in(OWNER)[0]["text"] == "from a real process"
    assert tg.token not in stderr


async def test_bridge_run_with_a_bad_token_exits_non_zero_with_one_clear_line(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    config = write_config(
        tmp_path, f'[telegram]\nenabled = true\ntoken = "999:WRONG"\napi_base = "{tg.api_base}"\n'
    )
    process = await start_bridge(tmp_path, "run", "--config", str(config))
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    text = stderr.decode()
    assert process.returncode == 1
    assert "rejected the bot token" in text and "Traceback" not in text
    assert [m for m, _ in tg.calls].count("getme") == 1


async def test_bridge_run_with_nothing_enabled_says_what_to_enable(tmp_path: Path) -> None:
    process = await start_bridge(tmp_path, "run")
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 2
    assert "[telegram] enabled = true" in stderr.decode()
    assert os.listdir(tmp_path) == []


async def test_bridge_run_serves_telegram_and_discord_in_one_process_and_stops_on_sigterm(
    tmp_path: Path, tg: FakeTelegram, dc: FakeDiscord, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("hello telegram"), fake.text("hello discord"))
    config = write_config(
        tmp_path,
        f'owners = ["telegram:{OWNER}", "discord:{DISCORD_OWNER}"]\n'
        f'[llm]\nbase_url = "{fake_llm.base_url}"\nmodel = "fake"\nmax_retries = 0\n'
        f'[storage]\npath = "{tmp_path / "bridge.db"}"\n'
        f'[telegram]\nenabled = true\ntoken = "{tg.token}"\napi_base = "{tg.api_base}"\npoll_timeout_s = 5\n'
        f'[discord]\nenabled = true\ntoken = "{dc.token}"\napi_base = "{dc.api_base}"\n'
        f'gateway_url = "{dc.gateway_url}"\n',
    )
    process = await start_bridge(tmp_path, "run", "--config", str(config))
    try:
        await dc.wait_for(lambda: dc.identify_count >= 1, timeout=30)
        tg.dm(OWNER, "hi from telegram")
        await tg.wait_for(lambda: len(tg.messages_in(OWNER)) >= 1, timeout=30)
        asked = dc.dm(DISCORD_OWNER, "hi from discord")
        await dc.wait_for(lambda: any(m["channel_id"] == asked["channel_id"] for m in dc.created), timeout=30)
        stderr, elapsed = await sigterm(process)
    finally:
        await reap(process)
    assert process.returncode == 0, stderr
    assert elapsed < 5
    assert tg.messages_in(OWNER)[0]["text"] == "hello telegram"
    assert [m["content"] for m in dc.created] == ["hello discord"]
    assert dc.token not in stderr and tg.token not in stderr
