"""Discord: the real DiscordAdapter (discord.py) on the fake REST API and gateway. Wraps the
`discord_rig` fixture of tests/adapters/conftest.py, on a fake that can also carry a send out and
never answer."""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from devkit.fakes.openai_server import FakeOpenAI
from tests.adapters.conftest import (
    CHANNEL,
    DISCORD_OWNER,
    GUILD,
    MEMBER,
    OTHER_CHANNEL,
    OTHER_GUILD,
    THREAD,
    DiscordRig,
)
from tests.fakes.discord_api import FakeDiscord, Upload
from tests.platforms.rig import HAS, Capabilities, Configure, Lacks, PlatformRig, Process, Said

CREATE = "POST /channels/{id}/messages"


class CarryingDiscord(FakeDiscord):
    """The fake Discord, whose next message create can be carried out and then never answered."""

    def __init__(self) -> None:
        super().__init__()
        self._hang_after = 0

    def hang_after_next_send(self) -> None:
        self._hang_after += 1

    async def _create_message(
        self, request: web.Request, params: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        response = await super()._create_message(request, params, body)
        if self._hang_after:
            self._hang_after -= 1
            await self._closing.wait()  # created, never answered
        return response


def discord_world(server: FakeDiscord) -> None:
    """The world of tests/adapters/conftest.py's `dc`: the owner, a member, two guilds, a thread."""
    server.user(DISCORD_OWNER, "owner")
    server.user(MEMBER, "member")
    server.add_guild(GUILD, "Home", channels=[(CHANNEL, "general")])
    server.add_guild(OTHER_GUILD, "Elsewhere", channels=[(OTHER_CHANNEL, "random")])
    server.add_thread(THREAD, CHANNEL, GUILD, "a thread")


class DiscordPlatform(PlatformRig):
    name = "discord"
    capabilities = Capabilities(
        groups=HAS,  # guild channels
        threads=HAS,
        edits=HAS,
        streaming=HAS,
        files=HAS,
        rate_limits=HAS,
        idempotent_sends=HAS,  # enforce_nonce
        encryption=Lacks("Discord's text chats are not end-to-end encrypted (only its calls are)"),
    )
    group_key = f"discord:channel:{CHANNEL}"

    def __init__(self, request: Any, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        self.dc: CarryingDiscord = request.getfixturevalue("dc")
        self.factory = request.getfixturevalue("discord_rig")
        self.live: DiscordRig | None = None
        self.poisoned: str | None = None

    @asynccontextmanager
    async def running(
        self, llm: FakeOpenAI, *, stream: bool = True, configure: Configure | None = None
    ) -> AsyncIterator[None]:
        def configured(settings: Any) -> None:
            settings.llm.stream = stream
            if configure is not None:
                configure(settings)

        async with self.factory(llm, configure=configured) as live:
            self.live = live
            with self.started(live.bridge, live.adapter):
                yield

    @property
    def dm_channel(self) -> str:
        return str(self.dc.dm_channel(DISCORD_OWNER)["id"])

    def _said(self, channel: int | str) -> list[Said]:
        said = []
        for created in [m for m in self.dc.created if m["channel_id"] == str(channel)]:
            now = self.dc.message(created["id"]) or created
            edits = sum(1 for e in self.dc.edits if e["message_id"] == now["id"])
            files = self.dc.files_of(now["id"]) if now["attachments"] else []
            file = (files[0][0], files[0][2]) if files else None
            said.append(Said(now["id"], now["content"], 1 + edits, file))
        return said

    async def dm(self, text: str) -> None:
        self.dc.dm(DISCORD_OWNER, text)

    def dm_said(self) -> list[Said]:
        return self._said(self.dm_channel)

    def output_calls(self) -> int:
        return len(self.dc.created) + len(self.dc.edits) + len(self.dc.typing)

    async def group(self, text: str, *, mention: bool) -> None:
        self.dc.post(CHANNEL, MEMBER, f"<@{self.dc.bot_id}> {text}" if mention else text)

    def group_said(self) -> list[Said]:
        return self._said(CHANNEL)

    async def in_thread(self, text: str) -> None:
        self.thread_key = f"discord:channel:{THREAD}"
        self.dc.post(THREAD, MEMBER, f"<@{self.dc.bot_id}> {text}", guild_id=GUILD)

    def thread_said(self) -> list[Said]:
        return self._said(THREAD)

    async def dm_file(self, caption: str, name: str, mime: str, data: bytes) -> None:
        self.dc.dm(DISCORD_OWNER, caption, attachments=[Upload(name, mime, data)])

    def rate_limit_next_send(self) -> float:
        # discord.py waits out a 429 itself, for real: keep it short.
        self.dc.fail_next(CREATE, "429", retry_after=0.3)
        return 0.3

    def rate_limit_waits(self) -> list[float]:
        creates = self.dc.requests_to(CREATE)
        return [b["at"] - a["at"] for a, b in itertools.pairwise(creates) if a.get("fault") == "429"]

    def send_attempts(self) -> int:
        return len(self.dc.requests_to(CREATE))

    async def poison(self) -> None:
        # discord.py takes it; the adapter can't make an Attachment of a content_type that is no string.
        odd = {
            "id": "1",
            "filename": "odd.bin",
            "size": 1,
            "url": "https://cdn.invalid/odd",
            "content_type": 5,
        }
        odd["proxy_url"] = odd["url"]
        self.poisoned = str(self.dc.dm(DISCORD_OWNER, "look", attachments=[odd])["id"])

    async def assert_poison_skipped(self, records: list[logging.LogRecord]) -> None:
        # Discord never delivers an event again: skipping it is logging it once.
        skipped = [r for r in records if "could not be handled; skipped" in r.getMessage()]
        assert [r.getMessage() for r in skipped] == [
            f"Discord: message {self.poisoned} in channel {self.dm_channel} could not be handled; skipped"
        ]

    @asynccontextmanager
    async def process(self, llm: FakeOpenAI) -> AsyncIterator[Process]:
        dc = self.dc
        section = (
            f'[discord]\nenabled = true\ntoken = "{dc.token}"\napi_base = "{dc.api_base}"\n'
            f'gateway_url = "{dc.gateway_url}"\n'
        )
        config = self.config_file(llm, f"discord:{DISCORD_OWNER}", section)
        identified = dc.identify_count
        async with self.bridge_run(
            config, lambda: dc.identify_count > identified and dc.connected
        ) as process:
            yield process

    def hang_next_send(self) -> None:
        self.dc.hang_after_next_send()
