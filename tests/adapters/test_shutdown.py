"""SIGTERM during a run: the answer finishes within the grace period, or is stopped and the chat told."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path
from typing import Any

from tests.adapters.conftest import OWNER
from tests.fakes import openai_server as fake
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_api import FakeTelegram
from tests.invariants import assert_intact
from tests.processes import bridge_running, start_bridge, telegram_run_config


def config_for(tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, grace_s: float) -> Path:
    return telegram_run_config(
        tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, f"[runs]\nshutdown_grace_s = {grace_s}\n"
    )


class SlowModel:
    """Answers after `delay_s`, so a SIGTERM can arrive while the request is open."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def __call__(self, request: dict[str, Any]) -> Reply:
        await asyncio.sleep(self.delay_s)
        return fake.text("finished in time")


async def sigterm_during_run(tmp_path: Path, tg: FakeTelegram, delay_s: float, grace_s: float) -> float:
    async with FakeOpenAI(SlowModel(delay_s)) as llm:
        process = await start_bridge(tmp_path, "run", "--config", str(config_for(tmp_path, tg, llm, grace_s)))
        try:
            tg.dm(OWNER, "a slow question")
            await llm.wait_for_requests(1, timeout=30)
            loop = asyncio.get_running_loop()
            started = loop.time()
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), grace_s + 10)
            return loop.time() - started
        finally:
            if process.returncode is None:
                process.kill()


async def test_a_run_in_progress_finishes_and_is_delivered_after_sigterm(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    await sigterm_during_run(tmp_path, tg, delay_s=1.0, grace_s=10)
    assert [m["text"] for m in tg.messages_in(OWNER)] == ["finished in time"]
    with sqlite3.connect(tmp_path / "bridge.db") as db:
        assert list(db.execute("SELECT status FROM runs")) == [("ok",)]
    assert_intact(tmp_path / "bridge.db", ["a slow question"])


async def test_a_run_past_the_grace_period_is_stopped_and_the_chat_told(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    elapsed = await sigterm_during_run(tmp_path, tg, delay_s=60, grace_s=0.5)
    assert elapsed < 8
    [notice] = [m["text"] for m in tg.messages_in(OWNER)]
    assert "shutting down" in notice and "/retry" in notice
    with sqlite3.connect(tmp_path / "bridge.db") as db:
        assert list(db.execute("SELECT status FROM runs")) == [("cancelled",)]
        assert list(db.execute("SELECT content FROM messages WHERE kind = 'user'")) == [("a slow question",)]


async def test_after_a_sigterm_cut_a_run_short_retry_answers_it_at_the_next_start(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    await sigterm_during_run(tmp_path, tg, delay_s=60, grace_s=0.5)
    async with FakeOpenAI() as llm:
        llm.push(fake.text("answered after the restart"))
        async with bridge_running(tmp_path, config_for(tmp_path, tg, llm, 5)):
            tg.dm(OWNER, "/retry")
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 2, timeout=30)
    assert tg.messages_in(OWNER)[1]["text"] == "answered after the restart"
    assert [m["content"] for m in llm.requests[0]["messages"][1:]] == ["a slow question"]
    assert_intact(tmp_path / "bridge.db", ["a slow question"])
