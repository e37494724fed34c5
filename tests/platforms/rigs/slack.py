"""Slack: the real SlackAdapter (slack_sdk) on the fake Web API and Socket Mode. Wraps the `slack` and
`slack_rig` fixtures of tests/adapters/slack/conftest.py."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from devkit.fakes.openai_server import FakeOpenAI
from tests.adapters.slack.conftest import CHANNEL, MEMBER, OWNER, SlackRig
from tests.fakes.slack_api import FakeSlack, Upload
from tests.platforms.rig import HAS, Capabilities, Configure, Lacks, PlatformRig, Process, Said

# The calls that make the bot show something: posts, updates, and the steps of a file upload.
OUTPUT = ("chat.postMessage", "chat.update", "files.getUploadURLExternal", "files.completeUploadExternal")


class SlackPlatform(PlatformRig):
    name = "slack"
    capabilities = Capabilities(
        groups=HAS,  # channels
        threads=HAS,
        edits=HAS,
        streaming=HAS,
        files=HAS,
        rate_limits=HAS,
        idempotent_sends=Lacks(
            "`chat.postMessage` takes no idempotency key: a post a kill caught on its way is sent again at "
            "the next start and shows twice if it had arrived (`[delivery] resend_uncertain = false` "
            "records it uncertain instead)"
        ),
        encryption=Lacks(
            "Slack has no end-to-end encrypted conversations (Enterprise Key Management encrypts them at "
            "rest, with the customer's keys)"
        ),
    )
    group_key = f"slack:group:{CHANNEL}"

    def __init__(self, request: Any, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        self.slack: FakeSlack = request.getfixturevalue("slack")
        self.factory = request.getfixturevalue("slack_rig")
        self.live: SlackRig | None = None
        self.poisoned: str | None = None
        self.thread_ts: str | None = None

    @asynccontextmanager
    async def running(
        self, llm: FakeOpenAI, *, stream: bool = True, configure: Configure | None = None
    ) -> AsyncIterator[None]:
        async with self.factory(llm, stream=stream, configure=configure) as live:
            self.live = live
            with self.started(live.bridge, live.adapter):
                yield

    def _said(self, channel: str, thread_ts: str | None = None) -> list[Said]:
        said = []
        for m in self.slack.messages_in(channel, thread_ts):
            updates = sum(1 for u in self.slack.updates if u["ts"] == m["ts"])
            files = m.get("files") or []
            file = (files[0]["name"], self.slack.file_bytes(files[0]["id"])) if files else None
            said.append(Said(m["ts"], m["text"], 1 + updates, file))
        return said

    @property
    def mention(self) -> str:
        return f"<@{self.slack.bot_user_id}>"

    async def dm(self, text: str) -> None:
        self.slack.dm(OWNER, text)

    def dm_said(self) -> list[Said]:
        return self._said(self.slack.dm_channel(OWNER))

    def output_calls(self) -> int:
        return sum(len(self.slack.calls(method)) for method in OUTPUT)

    async def group(self, text: str, *, mention: bool) -> None:
        self.slack.post(CHANNEL, MEMBER, f"{self.mention} {text}" if mention else text)

    def group_said(self) -> list[Said]:
        return self._said(CHANNEL)

    async def in_thread(self, text: str) -> None:
        parent = self.slack.post(CHANNEL, MEMBER, "a topic to discuss")
        self.thread_ts = parent["ts"]
        self.thread_key = f"slack:group:{CHANNEL}:topic:{parent['ts']}"
        self.slack.post(CHANNEL, MEMBER, f"{self.mention} {text}", thread_ts=parent["ts"])

    def thread_said(self) -> list[Said]:
        return self._said(CHANNEL, self.thread_ts)

    async def dm_file(self, caption: str, name: str, mime: str, data: bytes) -> None:
        self.slack.dm(OWNER, caption, files=(Upload(name, mime, data),))

    def rate_limit_next_send(self) -> float:
        self.slack.fail_next("chat.postMessage", "429", retry_after=7)
        return 7.0

    def rate_limit_waits(self) -> list[float]:
        assert self.live is not None
        return list(self.live.waits)  # the adapter's sleeps, recorded instead of slept

    def send_attempts(self) -> int:
        return len(self.slack.calls("chat.postMessage"))

    async def poison(self) -> None:
        # A message event whose user is a number: slack_sdk hands it over, the adapter can't read it.
        channel = self.slack.dm_channel(OWNER)
        event = {"type": "message", "channel": channel, "channel_type": "im", "user": 5, "ts": "1.000001"}
        self.poisoned = self.slack.push_event(event)["envelope_id"]

    async def assert_poison_skipped(self, records: list[logging.LogRecord]) -> None:
        skipped = [r.getMessage() for r in records if "skipped event" in r.getMessage()]
        assert len(skipped) == 1 and str(self.poisoned) in skipped[0]
        # Acknowledged, so Slack never sends it again.
        await self.slack.wait_for(lambda: self.poisoned in self.slack.acks)

    @asynccontextmanager
    async def process(self, llm: FakeOpenAI) -> AsyncIterator[Process]:
        slack = self.slack
        section = (
            f'[slack]\nenabled = true\nbot_token = "{slack.bot_token}"\napp_token = "{slack.app_token}"\n'
            f'api_base = "{slack.api_base}"\n'
        )
        config = self.config_file(llm, f"slack:{OWNER}", section)
        connected = slack.connections
        async with self.bridge_run(config, lambda: slack.connections > connected) as process:
            yield process

    def hang_next_send(self) -> None:
        self.slack.fail_next("chat.postMessage", "hang")  # carried out, never answered
