"""kill -9 of `bridge run` mid-run, then a restart: nothing the user wrote is lost, the chat is told."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import bridge_process, bridge_running, kill9, telegram_run_config
from tests.adapters.conftest import OWNER
from tests.invariants import assert_intact


def config_for(tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI) -> Path:
    # Whole replies: these kills aim at the reply's own sendMessage, which a draft would come before.
    return telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, stream=False)


class CrashModel:
    """Calls get_current_time first; then hangs on the request numbered `hang_at` until killed."""

    def __init__(self, hang_at: int) -> None:
        self.hang_at = hang_at
        self.calls = 0
        self.recovered = False

    async def __call__(self, request: dict[str, Any]) -> Reply:
        self.calls += 1
        if self.recovered:
            asked = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
            return fake.text(f"answer to: {asked}")
        if self.calls == self.hang_at:
            await asyncio.Event().wait()  # the process is killed while this request is open
        return fake.tool_call("get_current_time", {})


def db_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return list(db.execute(sql))


@pytest.mark.parametrize("hang_at", [1, 2], ids=["before-any-tool", "after-a-tool-ran"])
async def test_a_kill_mid_run_loses_nothing_and_the_next_start_offers_a_retry(
    tmp_path: Path, tg: FakeTelegram, hang_at: int
) -> None:
    model = CrashModel(hang_at)
    async with FakeOpenAI(model) as llm:
        config = config_for(tmp_path, tg, llm)
        async with bridge_process(tmp_path, config) as process:
            tg.dm(OWNER, "what time is it?")
            await llm.wait_for_requests(hang_at, timeout=30)
            await kill9(process)
        db = tmp_path / "bridge.db"
        assert db_rows(db, "SELECT content FROM messages WHERE kind = 'user'") == [("what time is it?",)]
        assert db_rows(db, "SELECT status FROM runs") == [("running",)]
        sent_before = len(tg.messages_in(OWNER))

        model.recovered = True
        async with bridge_process(tmp_path, config) as process:
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) > sent_before, timeout=30)
            notice = tg.messages_in(OWNER)[sent_before]["text"]
            assert "interrupted" in notice and "what time is it?" in notice and "/retry" in notice
            tg.dm(OWNER, "/retry")
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) > sent_before + 1, timeout=30)
            tg.dm(OWNER, "and now?")
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) > sent_before + 2, timeout=30)
            process.terminate()
            await asyncio.wait_for(process.wait(), 10)
    texts = [m["text"] for m in tg.messages_in(OWNER)[sent_before:]]
    assert texts[1:] == ["answer to: what time is it?", "answer to: and now?"]
    statuses = [row[0] for row in db_rows(db, "SELECT status FROM runs ORDER BY started_at")]
    assert statuses == ["aborted", "ok", "ok"]
    # Stored once each (the interrupted question is answered from history, not asked again), no
    # exchange split by the kill, and the interrupted notice sent once.
    assert_intact(db, ["what time is it?", "and now?"])


async def test_a_kill_while_the_reply_is_being_sent_delivers_it_once_at_the_next_start(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    async with FakeOpenAI() as llm:
        llm.push(fake.text("the answer"), fake.text("next answer"))
        config = config_for(tmp_path, tg, llm)
        tg.fail_next("sendMessage", "hang")
        async with bridge_process(tmp_path, config) as process:
            tg.dm(OWNER, "question")
            await tg.wait_for(lambda: any(c[0] == "sendmessage" for c in tg.calls), timeout=30)
            await kill9(process)
        db = tmp_path / "bridge.db"
        assert db_rows(db, "SELECT kind, state FROM outbox") == [("reply", "sending")]  # in flight: uncertain
        assert tg.messages_in(OWNER) == []

        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 1, timeout=30)
            tg.dm(OWNER, "and then?")
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 2, timeout=30)
    assert [m["text"] for m in tg.messages_in(OWNER)] == ["the answer", "next answer"]
    assert len(llm.requests) == 2  # the finished run was delivered, not run again
    assert_intact(db, ["question", "and then?"])


class GatedAnswer:
    """Calls get_current_time, then answers only once the test opens the gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.calls = 0

    async def __call__(self, request: dict[str, Any]) -> Reply:
        self.calls += 1
        if self.calls == 1:
            return fake.tool_call("get_current_time", {})
        if self.calls == 2:
            await self.gate.wait()
            return fake.text("It is noon.")
        asked = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
        return fake.text(f"answer to: {asked}")


async def test_a_kill_after_the_answer_is_stored_never_loses_the_reply_even_while_activity_hangs(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    model = GatedAnswer()
    async with FakeOpenAI(model) as llm:
        config = config_for(tmp_path, tg, llm)
        # The activity display's edit never returns: it must not hold the reply back.
        tg.fail_next("editMessageText", "hang")
        async with bridge_process(tmp_path, config) as process:
            tg.dm(OWNER, "what time is it?")
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 1, timeout=30)  # the activity
            tg.fail_next("sendMessage", "hang")  # and now the reply's send never returns either
            model.gate.set()
            await tg.wait_for(lambda: tg.methods().count("sendmessage") == 2, timeout=30)
            await kill9(process)
        db = tmp_path / "bridge.db"
        assert db_rows(db, "SELECT status FROM runs") == [("ok",)]
        assert db_rows(db, "SELECT kind, state FROM outbox ORDER BY id") == [
            ("activity", "sent"),
            ("reply", "sending"),
        ]
        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 2, timeout=30)
            tg.dm(OWNER, "and then?")
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 3, timeout=30)
    texts = [m["text"] for m in tg.messages_in(OWNER)]
    assert texts[1:] == ["It is noon.", "answer to: and then?"]
    assert_intact(db, ["what time is it?", "and then?"])


async def test_a_kill_during_start_up_still_tells_the_chats_whose_answers_were_cut_short(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    model = CrashModel(hang_at=1)
    async with FakeOpenAI(model) as llm:
        config = config_for(tmp_path, tg, llm)
        async with bridge_process(tmp_path, config) as process:
            tg.dm(OWNER, "what time is it?")
            await llm.wait_for_requests(1, timeout=30)
            await kill9(process)
        # The next start marks the run aborted; the notice's send hangs, and a second kill comes.
        tg.fail_next("sendMessage", "hang")
        async with bridge_process(tmp_path, config) as process:
            await tg.wait_for(lambda: "sendmessage" in tg.methods(), timeout=30)
            await kill9(process)
        db = tmp_path / "bridge.db"
        assert db_rows(db, "SELECT status FROM runs") == [("aborted",)]
        assert db_rows(db, "SELECT kind, state FROM outbox") == [("notice", "sending")]
        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 1, timeout=30)
    [notice] = [m["text"] for m in tg.messages_in(OWNER)]
    assert "interrupted" in notice and "what time is it?" in notice
    assert_intact(db, ["what time is it?"])


async def test_a_kill_loses_no_message_the_platform_was_told_was_received_even_while_sends_are_slow(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    async with FakeOpenAI() as llm:
        llm.push(fake.text("answer to: important"))
        config = config_for(tmp_path, tg, llm)
        async with bridge_process(tmp_path, config) as process:
            await tg.wait_for(lambda: tg.open_polls > 0, timeout=30)
            # The answer to /help never gets through; the next message must not wait for it.
            tg.fail_next("sendMessage", "hang")
            tg.dm(OWNER, "/help")
            tg.dm(OWNER, "important")
            await tg.wait_for(lambda: not tg.pending_updates, timeout=30)  # confirmed to Telegram
            # The kill lands while the /help answer hangs on its way (not before it set off).
            await tg.wait_for(lambda: "sendmessage" in tg.methods(), timeout=30)
            await kill9(process)
        db = tmp_path / "bridge.db"
        # Confirmed means stored: the message is in history, and the /help answer in the outbox.
        assert db_rows(db, "SELECT content FROM messages WHERE kind = 'user'") == [("important",)]
        assert ("notice",) in db_rows(db, "SELECT kind FROM outbox")
        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 2, timeout=30)
    texts = [m["text"] for m in tg.messages_in(OWNER)]
    # Killed before its run began, it is answered at the restart; killed during the run, the chat is
    # told it was interrupted. Either way the chat hears about it; it was never dropped.
    assert texts[0].startswith("Commands:")
    assert texts[1] == "answer to: important" or ("interrupted" in texts[1] and "important" in texts[1])
    assert_intact(db, ["important"])


async def test_a_kill_while_a_voice_note_is_transcribed_keeps_it_and_retry_answers_its_words(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    async with FakeOpenAI() as llm:
        stt = f'[stt]\nbase_url = "{llm.base_url}"\n'
        config = telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, stt, stream=False)
        llm.push_transcript(fake.delay(600, fake.Reply(body={"text": "never heard"})))
        async with bridge_process(tmp_path, config) as process:
            tg.dm(OWNER, None, voice=b"OggS" + b"\x00" * 300)
            await llm.wait_for(lambda: len(llm.transcriptions) == 1, timeout=30)
            await kill9(process)
        db = tmp_path / "bridge.db"
        [(content, media)] = db_rows(db, "SELECT content, media FROM messages WHERE kind = 'user'")
        assert content == "" and '"voice": true' in media and "sha256" not in media  # kept, not yet read

        llm.push_transcript("book a table for two")
        llm.push(fake.text("Booked."))
        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 1, timeout=30)
            assert "interrupted" in tg.messages_in(OWNER)[0]["text"]
            tg.dm(OWNER, "/retry")
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 2, timeout=30)
    assert tg.messages_in(OWNER)[1]["text"] == "Booked."
    assert llm.requests[-1]["messages"][-1]["content"] == "[voice message, transcribed]\nbook a table for two"
    assert db_rows(db, "SELECT content FROM messages WHERE kind = 'user'") == [("book a table for two",)]
