"""SIGTERM during a run: the answer finishes within the grace period, or is stopped and the chat told."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import bridge_process, bridge_running, telegram_run_config
from tests.adapters.conftest import OWNER
from tests.invariants import assert_intact


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
    async with (
        FakeOpenAI(SlowModel(delay_s)) as llm,
        bridge_process(tmp_path, config_for(tmp_path, tg, llm, grace_s)) as process,
    ):
        tg.dm(OWNER, "a slow question")
        await llm.wait_for_requests(1, timeout=30)
        loop = asyncio.get_running_loop()
        started = loop.time()
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), grace_s + 10) == 0  # SIGTERM always exits 0
        return loop.time() - started


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


class SlowFirstAnswer:
    """The first request never answers in time; later ones answer at once with what they were asked."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, request: dict[str, Any]) -> Reply:
        self.calls += 1
        if self.calls == 1:
            await asyncio.sleep(120)
        asked = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
        return fake.text(f"answer to: {asked}")


async def test_sigterm_ends_the_process_in_time_while_a_message_waits_and_the_next_start_answers_it(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    async with FakeOpenAI(SlowFirstAnswer()) as llm:
        config = config_for(tmp_path, tg, llm, grace_s=1)
        async with bridge_process(tmp_path, config) as process:
            tg.dm(OWNER, "a slow question")
            await llm.wait_for_requests(1, timeout=30)
            tg.dm(OWNER, "waits its turn")
            await tg.wait_for(lambda: not tg.pending_updates, timeout=30)  # stored, queued
            loop = asyncio.get_running_loop()
            started = loop.time()
            process.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(process.wait(), 30)
            elapsed = loop.time() - started
        assert code == 0 and elapsed < 1 + 5
        [notice] = [m["text"] for m in tg.messages_in(OWNER)]
        assert "shutting down" in notice
        # The waiting message was neither answered nor dropped: the next start answers it by itself.
        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 2, timeout=30)
    assert tg.messages_in(OWNER)[1]["text"] == "answer to: waits its turn"
    assert_intact(tmp_path / "bridge.db", ["a slow question", "waits its turn"])


async def test_a_second_sigterm_ends_the_process_at_once(tmp_path: Path, tg: FakeTelegram) -> None:
    async with (
        FakeOpenAI(SlowModel(120)) as llm,
        bridge_process(tmp_path, config_for(tmp_path, tg, llm, 60)) as process,
    ):
        tg.dm(OWNER, "a slow question")
        await llm.wait_for_requests(1, timeout=30)
        process.send_signal(signal.SIGTERM)
        # The first signal is being handled (a grace period of 60 s) when the second one comes.
        assert process.stderr is not None
        async with asyncio.timeout(10):
            while b"shutting down" not in await process.stderr.readline():
                pass
        assert process.returncode is None
        loop = asyncio.get_running_loop()
        started = loop.time()
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 30)
        elapsed = loop.time() - started
    assert code == 0 and elapsed < 3
    # What the forced exit cut short is picked up like a crash: the message is kept.
    assert_intact(tmp_path / "bridge.db", ["a slow question"], finished=False)


@pytest.mark.parametrize("after_s", [0.3, 0.6, 1.2])
async def test_sigterm_at_any_moment_of_start_up_exits_0(
    tmp_path: Path, tg: FakeTelegram, after_s: float
) -> None:
    # The moments fall in the CLI's imports, the store's opening and the adapter's start: the SIGTERM
    # under test is sent at a point in time, so a fixed delay is the point, not a wait for an event.
    async with FakeOpenAI() as llm, bridge_process(tmp_path, config_for(tmp_path, tg, llm, 5)) as process:
        await asyncio.sleep(after_s)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 15) == 0
