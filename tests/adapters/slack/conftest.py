"""A whole Bridge with the real Slack adapter on the fake Slack (Web API and Socket Mode), answering
through the fake model. `slack_rig` is shaped for the conformance suite to come: a factory of a
running Bridge, and a rig that sends as users and reads what the bot posted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.slack import SlackAdapter
from bridge.app import Bridge
from bridge.config import Settings
from devkit.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.harness import make_settings

OWNER = "U0OWNER"
MEMBER = "U0MEMBER"
STRANGER = "U0STRANGER"
CHANNEL = "C0GENERAL"  # allowed
OTHER_CHANNEL = "C0RANDOM"  # the bot is in it, but it is not allowed

RigFactory = Callable[..., Any]


@dataclass
class SlackRig:
    bridge: Bridge
    adapter: SlackAdapter
    slack: FakeSlack
    waits: list[float]

    async def sent(
        self, channel: str, n: int, thread_ts: str | None = None, within: float = 5.0
    ) -> list[dict[str, Any]]:
        """Wait until the bot has at least n messages in the channel (or thread) and the answers are
        finished (a reply streams into a draft first); return them as they read now."""
        await self.slack.wait_for(lambda: len(self.slack.messages_in(channel, thread_ts)) >= n, within)
        await asyncio.wait_for(self.settled(), within)
        return self.slack.messages_in(channel, thread_ts)

    async def settled(self) -> None:
        """No answer is running and nothing waits to be sent or edited."""
        await self.bridge.lanes.idle()
        await self.bridge.delivery.idle()

    def mention(self) -> str:
        return f"<@{self.slack.bot_user_id}>"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        server.user(OWNER, "owner")
        server.user(MEMBER, "member")
        server.user(STRANGER, "stranger")
        server.channel(CHANNEL, "general")
        server.channel(OTHER_CHANNEL, "random")
        yield server


def slack_settings(tmp_path: Path, slack: FakeSlack, llm: FakeOpenAI, **section: Any) -> Settings:
    return make_settings(
        tmp_path,
        llm.base_url,
        owners=[f"slack:{OWNER}"],
        slack={
            "enabled": True,
            "bot_token": slack.bot_token,
            "app_token": slack.app_token,
            "api_base": slack.api_base,
            "allowed_channels": [CHANNEL],
            **section,
        },
    )


@pytest.fixture
def slack_rig(tmp_path: Path, slack: FakeSlack) -> RigFactory:
    """`async with slack_rig(llm, **slack_section) as r:` runs Bridge + SlackAdapter until the block ends.

    stream=False sends each reply whole; configure(settings) changes other sections before the Bridge
    is built; read_timeout_s shortens the Web API's read timeout, ping_interval_s the time Socket Mode
    takes to notice a lost connection."""

    @asynccontextmanager
    async def make(
        llm: FakeOpenAI,
        *,
        stream: bool = True,
        configure: Callable[[Settings], None] | None = None,
        read_timeout_s: float = 5.0,
        ping_interval_s: float = 10.0,
        **section: Any,
    ) -> AsyncIterator[SlackRig]:
        settings = slack_settings(tmp_path, slack, llm, **section)
        if configure is not None:
            configure(settings)
        settings.llm.stream = stream
        waits: list[float] = []

        async def no_wait(seconds: float) -> None:
            waits.append(seconds)

        adapter = SlackAdapter(
            settings.slack, sleep=no_wait, read_timeout_s=read_timeout_s, ping_interval_s=ping_interval_s
        )
        adapter.min_edit_interval_s = 0.01  # coalescing has its own test; keep these quick
        async with Bridge(settings) as bridge:
            bridge.add_sender(adapter)
            await adapter.start(bridge.handle)
            try:
                yield SlackRig(bridge, adapter, slack, waits)
            finally:
                await adapter.stop()

    return make
