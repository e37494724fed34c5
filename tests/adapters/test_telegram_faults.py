"""Telegram failing during delivery (429, 502, dropped connections, an outage): no doubles, nothing lost."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from adapters.telegram.retrying import MAX_ATTEMPTS
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.conftest import OWNER, RigFactory
from tests.invariants import assert_intact, rows


async def test_faults_on_every_delivery_call_of_a_tool_run_end_in_one_activity_and_one_reply(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "sessions"}),
        fake.tool_call("sessions_list", {}),
        fake.text("One session."),
    )
    async with rig(fake_llm) as r:
        tg.fail_next("sendMessage", "429", retry_after=2)
        tg.fail_next("sendMessage", "drop")
        tg.fail_next("sendMessage", "502")
        tg.fail_next("editMessageText", "502")
        tg.fail_next("editMessageText", "429", retry_after=1)
        tg.dm(OWNER, "my sessions?")
        _, reply = await r.sent_to(OWNER, 2)
        # The display finishes on its own, after the reply if its edits are slow.
        await tg.wait_for(lambda: "sessions_list() ✓" in tg.messages_in(OWNER)[0]["text"], 5)
        activity = tg.messages_in(OWNER)[0]
    assert activity["text"] == "⚙ load_tool_group(group_name=sessions) ✓\n⚙ sessions_list() ✓"
    assert reply["text"] == "One session."
    assert len(tg.messages_in(OWNER)) == 2
    db = tmp_path / "bridge.db"
    assert_intact(db, ["my sessions?"])
    assert rows(db, "SELECT kind, state FROM outbox ORDER BY id") == [("activity", "sent"), ("reply", "sent")]


async def test_a_reply_telegram_never_accepts_is_marked_failed_and_the_next_message_works(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    fake_llm.push(fake.text("lost in the outage"), fake.text("second answer"))
    async with rig(fake_llm, stream=False) as r:  # the reply's own sendMessage never lands
        tg.fail_next("sendMessage", "502", times=MAX_ATTEMPTS)
        tg.dm(OWNER, "first")
        await tg.wait_for(lambda: len([c for c in tg.calls if c[0] == "sendmessage"]) >= MAX_ATTEMPTS, 10)
        db = tmp_path / "bridge.db"
        await tg.wait_for(lambda: rows(db, "SELECT state FROM outbox") == [("failed",)], 10)
        tg.dm(OWNER, "second")
        [reply] = await r.sent_to(OWNER, 1)
    assert reply["text"] == "second answer"
    [(state, reason)] = rows(db, "SELECT state, reason FROM outbox WHERE text = 'lost in the outage'")
    assert state == "failed" and reason
    # The model's second turn still sees the first exchange: the failure lost nothing from history.
    assert [m["content"] for m in fake_llm.requests[1]["messages"][1:]] == [
        "first",
        "lost in the outage",
        "second",
    ]
    assert_intact(db, ["first", "second"])


async def test_a_user_who_blocked_the_bot_is_one_warning_naming_the_chat_and_the_row(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake_llm.push(fake.text("you blocked me"))
    async with rig(fake_llm, stream=False) as r:
        tg.fail_next("sendMessage", "403")
        tg.dm(OWNER, "hello")
        db = tmp_path / "bridge.db"
        await tg.wait_for(lambda: rows(db, "SELECT state FROM outbox") == [("failed",)], 10)
        assert r is not None
    [(row_id, reason)] = rows(db, "SELECT id, reason FROM outbox")
    assert reason == "Forbidden: bot was blocked by the user"
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert [r.levelno for r in refused] == [logging.WARNING]
    line = refused[0].getMessage()
    assert f"row {row_id} " in line and f"chat {OWNER}" in line and "main" in line
    assert line.count("Forbidden") == 1
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


async def test_a_reply_whose_send_timed_out_reading_is_uncertain_and_not_sent_again(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Telegram took the request and never answered (a read timeout): it may have the message, and a
    # message has no idempotency key, so it is neither resent nor called failed.
    fake_llm.push(fake.text("did you get this?"))
    async with rig(fake_llm, stream=False) as r:
        tg.fail_next("sendMessage", "hang")
        tg.dm(OWNER, "hello")
        db = tmp_path / "bridge.db"
        await tg.wait_for(lambda: rows(db, "SELECT state FROM outbox") == [("uncertain",)], 20)
        assert r is not None
    [(reason,)] = rows(db, "SELECT reason FROM outbox")
    assert "may have arrived" in reason
    assert len([c for c in tg.calls if c[0] == "sendmessage"]) == 1
    uncertain = [r for r in caplog.records if "uncertain" in r.getMessage()]
    assert [r.levelno for r in uncertain] == [logging.WARNING]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


async def test_an_edit_telegram_refuses_is_one_warning_and_the_reply_still_goes(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("It is noon."))
    async with rig(fake_llm, stream=False) as r:
        tg.fail_next("editMessageText", "403", description="Forbidden: bot was kicked from the group chat")
        tg.dm(OWNER, "time?")
        _, reply = await r.sent_to(OWNER, 2)
    assert reply["text"] == "It is noon."
    refused = [r for r in caplog.records if "refused an edit" in r.getMessage()]
    assert [r.levelno for r in refused] == [logging.WARNING]
    assert "kicked" in refused[0].getMessage() and "main" in refused[0].getMessage()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []
