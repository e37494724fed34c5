"""A whole Bridge with the real Telegram adapter, polling the fake Bot API, answering via the fake model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.telegram import TelegramAdapter
from bridge.app import Bridge
from bridge.config import Settings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_api import FakeTelegram

OWNER = 42
GROUP = -100777


@dataclass
class TelegramRig:
    bridge: Bridge
    adapter: TelegramAdapter
    tg: FakeTelegram
    llm: FakeOpenAI
    waits: list[float]

    async def sent_to(
        self, chat_id: int, n: int, thread_id: int | None = None, within: float = 5.0
    ) -> list[dict]:
        """Wait until at least n messages were sent to the chat; return them (current text)."""
        await self.tg.wait_for(lambda: len(self.tg.messages_in(chat_id, thread_id)) >= n, within)
        return self.tg.messages_in(chat_id, thread_id)

    def requests_with_user_text(self, text: str) -> list[int]:
        return [
            i
            for i, body in enumerate(self.llm.requests)
            if body["messages"][-1]["role"] == "user" and text in body["messages"][-1]["content"]
        ]


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


def telegram_settings(tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, **telegram: Any) -> Settings:
    return Settings(
        owners=[f"telegram:{OWNER}"],
        llm={"base_url": llm.base_url, "model": "fake", "max_retries": 0, "timeout_s": 5},
        storage={"path": str(tmp_path / "bridge.db")},
        tools={"workspace": str(tmp_path / "workspace")},
        telegram={
            "enabled": True,
            "token": tg.token,
            "api_base": tg.api_base,
            "poll_timeout_s": 1,
            "allowed_chats": [str(GROUP)],
            **telegram,
        },
    )


RigFactory = Callable[..., Any]


@pytest.fixture
def rig(tmp_path: Path, tg: FakeTelegram) -> RigFactory:
    """`async with rig(llm, **telegram_settings) as r:` runs Bridge + TelegramAdapter until the block ends."""

    @asynccontextmanager
    async def make(llm: FakeOpenAI, **telegram: Any) -> AsyncIterator[TelegramRig]:
        settings = telegram_settings(tmp_path, tg, llm, **telegram)
        waits: list[float] = []

        async def no_wait(seconds: float) -> None:
            waits.append(seconds)

        adapter = TelegramAdapter(settings.telegram, sleep=no_wait)
        adapter.min_edit_interval_s = 0.01  # coalescing has its own test; keep these quick
        async with Bridge(settings) as bridge:
            bridge.add_sender(adapter)
            await adapter.start(bridge.handle)
            try:
                yield TelegramRig(bridge, adapter, tg, llm, waits)
            finally:
                await adapter.stop()

    return make
