"""Poison updates on Telegram: one update that can't be parsed or handled is logged once and skipped."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from telegram import Update

from adapters.telegram.updates import SECRET_HEADER
from bridge.events import Inbound
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import start_bridge, telegram_run_config
from tests.adapters.conftest import GROUP, OWNER, RigFactory
from tests.adapters.test_telegram_intake import Recorder, running, webhook_settings

FRIEND = 777


def old_server_poll(chat_id: int, user_id: int) -> dict[str, Any]:
    """A `message` update holding a poll as a Bot API 9.5 server sends it (self-hosted, not upgraded).

    Such a server knows no poll option persistent_id and no Poll.allows_revoting (both Bot API 9.6),
    nor members_only (10.0); PTB 22.8 requires all three, so Update.de_json raises TypeError.
    """
    return {
        "message": {
            "message_id": 990,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private", "first_name": "User"},
            "from": {"id": user_id, "is_bot": False, "first_name": "User"},
            "poll": {
                "id": "5123456789012345678",
                "question": "Lunch?",
                "options": [{"text": "yes", "voter_count": 0}, {"text": "no", "voter_count": 0}],
                "total_voter_count": 0,
                "is_closed": False,
                "is_anonymous": True,
                "type": "regular",
                "allows_multiple_answers": False,
            },
        }
    }


async def answer_by_question(request: dict[str, Any]) -> Reply:
    """The model: answers each chat's last message by name, so concurrent chats can't swap answers."""
    asked = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
    return fake.text(f"answer to: {asked}")


def skipped_lines(text: str, update_id: int) -> list[str]:
    return [line for line in text.splitlines() if f"skipped update {update_id}," in line]


def test_ptb_cannot_parse_a_poll_as_an_older_bot_api_server_sends_it() -> None:
    # The premise of this file: if PTB ever accepts it, pick another update it can't parse.
    with pytest.raises(TypeError, match="required argument"):
        Update.de_json({"update_id": 1, **old_server_poll(OWNER, OWNER)}, None)


async def test_a_poison_update_between_two_chats_messages_is_logged_once_and_every_chat_carries_on(
    rig: RigFactory, tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeOpenAI(answer_by_question) as llm, rig(llm) as r:
        tg.dm(OWNER, "before the poll")
        poison = tg.push_raw_update(old_server_poll(OWNER, OWNER))
        tg.group(GROUP, 5, "@bridge_test_bot after the poll")
        [dm_answer] = await r.sent_to(OWNER, 1)
        [group_answer] = await r.sent_to(GROUP, 1)
        await tg.wait_for(lambda: tg.pending_updates == [])
        polls = tg.methods().count("getupdates")
        await asyncio.sleep(3)  # idle polling with poll_timeout_s = 1: about 3 more getUpdates
        idle_polls = tg.methods().count("getupdates") - polls
    assert dm_answer["text"] == "answer to: before the poll"
    assert group_answer["text"] == "answer to: after the poll"
    assert idle_polls < 20
    assert tg.pending_updates == []
    # Only this update's line: the core may log its own errors as the rig stops.
    [logged] = [r for r in caplog.records if "skipped update" in r.getMessage()]
    assert logged.levelno == logging.ERROR
    assert f"skipped update {poison['update_id']}," in logged.getMessage()
    assert "TypeError" in logged.getMessage()
    assert logged.exc_info is not None  # the traceback, once


async def test_an_update_the_core_fails_on_is_skipped_and_the_traceback_is_logged_once(
    tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    stored: list[str] = []

    async def core(inbound: Inbound) -> None:
        if inbound.text.startswith("boom"):
            raise RuntimeError(f"handler bug on {inbound.text!r}")
        stored.append(inbound.text)

    async with running(tg, core):
        for text in ("one", "boom 1", "two", "boom 2", "three"):
            tg.dm(OWNER, text)
        await tg.wait_for(lambda: stored == ["one", "two", "three"] and tg.pending_updates == [])
    errors = [r for r in caplog.records if "skipped update" in r.getMessage()]
    assert all(r.levelno == logging.ERROR for r in errors)
    assert [r.getMessage().split(",")[0] for r in errors] == [
        "Telegram: skipped update 2",
        "Telegram: skipped update 4",
    ]
    assert [r.exc_info is not None for r in errors] == [True, False]


async def test_a_poison_update_on_the_webhook_is_answered_200_and_logged_once(
    tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    core = Recorder()
    hook = webhook_settings()
    headers = {SECRET_HEADER: "s3cret-token"}
    async with running(tg, core, **hook), aiohttp.ClientSession() as http:
        poison = {"update_id": 700001, **old_server_poll(OWNER, OWNER)}
        async with http.post(hook["webhook_url"], json=poison, headers=headers) as answer:
            assert answer.status == 200  # so Telegram stops sending it
        good = {"update_id": 700002, "message": tg.dm(OWNER, "fine")}
        async with http.post(hook["webhook_url"], json=good, headers=headers) as answer:
            assert answer.status == 200
        async with http.post(hook["webhook_url"], data=b"{not json", headers=headers) as answer:
            assert answer.status == 400
    assert core.stored == ["fine"]
    [logged] = [r.getMessage() for r in caplog.records if "skipped update" in r.getMessage()]
    assert "skipped update 700001," in logged


async def test_bridge_run_skips_a_poison_update_exits_0_on_sigterm_and_is_not_stuck_after_a_restart(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    async with FakeOpenAI(answer_by_question) as llm:
        config = telegram_run_config(
            tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, f'allowed_users = ["{FRIEND}"]\n'
        )
        tg.dm(OWNER, "before the poll")
        poison_id = tg.push_raw_update(old_server_poll(FRIEND, FRIEND))["update_id"]
        tg.dm(FRIEND, "after the poll")
        process = await start_bridge(tmp_path, "run", "--config", str(config))
        try:
            await tg.wait_for(lambda: bool(tg.messages_in(OWNER) and tg.messages_in(FRIEND)), timeout=30)
            await tg.wait_for(lambda: tg.pending_updates == [], timeout=10)
            await tg.wait_for(lambda: tg.open_polls >= 1, timeout=10)
            process.send_signal(signal.SIGTERM)
            _, stderr_bytes = await asyncio.wait_for(process.communicate(), timeout=10)
        finally:
            if process.returncode is None:
                process.kill()
        stderr = stderr_bytes.decode()
        assert process.returncode == 0, stderr
        assert len(skipped_lines(stderr, poison_id)) == 1, stderr
        assert stderr.count("Traceback") <= 1
        assert tg.methods().count("getupdates") < 30  # no tight loop on the poison update
        assert [m["text"] for m in tg.messages_in(OWNER)] == ["answer to: before the poll"]
        assert [m["text"] for m in tg.messages_in(FRIEND)] == ["answer to: after the poll"]

        process = await start_bridge(tmp_path, "run", "--config", str(config))
        try:
            tg.dm(OWNER, "after the restart")
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 2, timeout=30)
            process.send_signal(signal.SIGTERM)
            _, stderr_bytes = await asyncio.wait_for(process.communicate(), timeout=10)
        finally:
            if process.returncode is None:
                process.kill()
    stderr = stderr_bytes.decode()
    assert process.returncode == 0, stderr
    assert skipped_lines(stderr, poison_id) == []  # confirmed the first time: never fetched again
    assert tg.messages_in(OWNER)[1]["text"] == "answer to: after the restart"
