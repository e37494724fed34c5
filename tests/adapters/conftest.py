"""A whole Bridge with the real Telegram adapter, polling the fake Bot API, answering via the fake model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from discord.gateway import DiscordWebSocket
from discord.http import Route as DiscordRoute

from adapters.discord import DiscordAdapter
from adapters.telegram import TelegramAdapter
from bridge.app import Bridge
from bridge.config import Settings
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from tests.fakes.discord_api import FakeDiscord
from tests.harness import make_settings

OWNER = 42
GROUP = -100777
# Discord ids of the fake's world.
DISCORD_OWNER = 5001
MEMBER = 5002
GUILD = 7001
CHANNEL = 7101
OTHER_GUILD = 7002
OTHER_CHANNEL = 7201
THREAD = 7301


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
        """Wait until at least n messages were sent to the chat and the answers are finished (a reply
        streams into a draft first); return them (current text)."""
        await self.tg.wait_for(lambda: len(self.tg.messages_in(chat_id, thread_id)) >= n, within)
        await asyncio.wait_for(self.settled(), within)
        return self.tg.messages_in(chat_id, thread_id)

    async def settled(self) -> None:
        """No answer is running and nothing waits to be sent or edited."""
        await self.bridge.lanes.idle()
        await self.bridge.delivery.idle()

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
    return make_settings(
        tmp_path,
        llm.base_url,
        owners=[f"telegram:{OWNER}"],
        telegram={
            "enabled": True,
            "token": tg.token,
            "api_base": tg.api_base,
            "poll_timeout_s": 1,
            "allowed_chats": [str(GROUP)],
            **telegram,
        },
    )


@pytest.fixture
async def dc(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    # The adapter points discord.py's class attributes at the fake; restore them after the test.
    monkeypatch.setattr(DiscordRoute, "BASE", DiscordRoute.BASE)
    monkeypatch.setattr(DiscordWebSocket, "DEFAULT_GATEWAY", DiscordWebSocket.DEFAULT_GATEWAY)
    async with FakeDiscord() as server:
        server.user(DISCORD_OWNER, "owner")
        server.user(MEMBER, "member")
        server.add_guild(GUILD, "Home", channels=[(CHANNEL, "general")])
        server.add_guild(OTHER_GUILD, "Elsewhere", channels=[(OTHER_CHANNEL, "random")])
        server.add_thread(THREAD, CHANNEL, GUILD, "a thread")
        yield server


RigFactory = Callable[..., Any]


@pytest.fixture
def rig(tmp_path: Path, tg: FakeTelegram) -> RigFactory:
    """`async with rig(llm, **telegram_settings) as r:` runs Bridge + TelegramAdapter until the block ends."""

    @asynccontextmanager
    async def make(
        llm: FakeOpenAI,
        *,
        stream: bool = True,
        configure: Callable[[Settings], None] | None = None,
        **telegram: Any,
    ) -> AsyncIterator[TelegramRig]:
        settings = telegram_settings(tmp_path, tg, llm, **telegram)
        if configure is not None:
            configure(settings)  # [media], [stt], vision: read when the Bridge is built
        # stream=False: each reply is sent whole, for tests of what happens to the reply's own send.
        settings.llm.stream = stream
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


@dataclass
class DiscordRig:
    bridge: Bridge
    adapter: DiscordAdapter
    dc: FakeDiscord
    waits: list[float]

    def bot_messages(self, channel_id: int | str) -> list[dict[str, Any]]:
        """The bot's messages in the channel, as they read now (an answer streams into its message)."""
        created = [m for m in self.dc.created if m["channel_id"] == str(channel_id)]
        return [{**m, **(self.dc.message(m["id"]) or {})} for m in created]

    async def bot_sent(self, channel_id: int | str, n: int, within: float = 5.0) -> list[dict[str, Any]]:
        """Wait until at least n messages were sent and the answers are finished; return them."""
        await self.dc.wait_for(lambda: len(self.bot_messages(channel_id)) >= n, within)
        await asyncio.wait_for(self.settled(), within)
        return self.bot_messages(channel_id)

    async def settled(self) -> None:
        """No answer is running and nothing waits to be sent or edited."""
        await self.bridge.lanes.idle()
        await self.bridge.delivery.idle()


def discord_settings(tmp_path: Path, dc: FakeDiscord, llm: FakeOpenAI, **discord: Any) -> Settings:
    return make_settings(
        tmp_path,
        llm.base_url,
        owners=[f"discord:{DISCORD_OWNER}"],
        discord={
            "enabled": True,
            "token": dc.token,
            "api_base": dc.api_base,
            "gateway_url": dc.gateway_url,
            "allowed_guilds": [str(GUILD)],
            **discord,
        },
    )


@pytest.fixture
def discord_rig(tmp_path: Path, dc: FakeDiscord) -> RigFactory:
    """`async with discord_rig(llm, **discord) as r:` runs Bridge + DiscordAdapter until the block ends."""

    @asynccontextmanager
    async def make(
        llm: FakeOpenAI, *, configure: Callable[[Settings], None] | None = None, **discord: Any
    ) -> AsyncIterator[DiscordRig]:
        settings = discord_settings(tmp_path, dc, llm, **discord)
        if configure is not None:
            configure(settings)  # [media], [stt], vision: read when the Bridge is built
        waits: list[float] = []

        async def no_wait(seconds: float) -> None:
            waits.append(seconds)

        adapter = DiscordAdapter(
            settings.discord, client_options={"guild_ready_timeout": 0.05}, sleep=no_wait
        )
        adapter.min_edit_interval_s = 0.01
        async with Bridge(settings) as bridge:
            bridge.add_sender(adapter)
            await adapter.start(bridge.handle)
            try:
                yield DiscordRig(bridge, adapter, dc, waits)
            finally:
                await adapter.stop()

    return make
