"""kill -9 of `bridge run` mid-run, then a restart: nothing the user wrote is lost, the chat is told."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.conftest import OWNER
from tests.fakes import openai_server as fake
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_api import FakeTelegram
from tests.invariants import assert_intact
from tests.processes import bridge_running, start_bridge, telegram_run_config


def config_for(tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI) -> Path:
    return telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, llm.base_url)


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
        process = await start_bridge(tmp_path, "run", "--config", str(config))
        try:
            tg.dm(OWNER, "what time is it?")
            await llm.wait_for_requests(hang_at, timeout=30)
            process.kill()  # SIGKILL: no cleanup of any kind
            await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
        db = tmp_path / "bridge.db"
        assert db_rows(db, "SELECT content FROM messages WHERE kind = 'user'") == [("what time is it?",)]
        assert db_rows(db, "SELECT status FROM runs") == [("running",)]
        sent_before = len(tg.messages_in(OWNER))

        model.recovered = True
        process = await start_bridge(tmp_path, "run", "--config", str(config))
        try:
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) > sent_before, timeout=30)
            notice = tg.messages_in(OWNER)[sent_before]["text"]
            assert "interrupted" in notice and "what time is it?" in notice and "/retry" in notice
            tg.dm(OWNER, "/retry")
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) > sent_before + 1, timeout=30)
            tg.dm(OWNER, "and now?")
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) > sent_before + 2, timeout=30)
            process.terminate()
            await asyncio.wait_for(process.wait(), 10)
        finally:
            if process.returncode is None:
                process.kill()
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
        process = await start_bridge(tmp_path, "run", "--config", str(config))
        try:
            tg.dm(OWNER, "question")
            await tg.wait_for(lambda: any(c[0] == "sendmessage" for c in tg.calls), timeout=30)
            process.kill()
            await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
        db = tmp_path / "bridge.db"
        assert db_rows(db, "SELECT kind, state FROM outbox") == [("reply", "pending")]
        assert tg.messages_in(OWNER) == []

        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 1, timeout=30)
            tg.dm(OWNER, "and then?")
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 2, timeout=30)
    assert [m["text"] for m in tg.messages_in(OWNER)] == ["the answer", "next answer"]
    assert len(llm.requests) == 2  # the finished run was delivered, not run again
    assert_intact(db, ["question", "and then?"])
