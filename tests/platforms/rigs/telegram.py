"""Telegram: the real TelegramAdapter (python-telegram-bot) polling the fake Bot API. Wraps the `rig`
fixture of tests/adapters/conftest.py, on a fake that can also carry a send out and never answer."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import telegram_run_config
from tests.adapters.conftest import GROUP, OWNER, TelegramRig
from tests.adapters.test_telegram_poison import old_server_poll
from tests.platforms.rig import HAS, Capabilities, Configure, Lacks, PlatformRig, Process, Said

MEMBER = 5
TOPIC = 77


class CarryingTelegram(FakeTelegram):
    """The fake Bot API, whose next sendMessage can be carried out and then never answered, as when
    the bot is killed while Telegram handles its request."""

    def __init__(self) -> None:
        super().__init__()
        self._hang_after = 0

    def hang_after_next_send(self) -> None:
        self._hang_after += 1

    def _handlers(self) -> Mapping[str, Callable[[dict[str, Any]], Any]]:
        handlers = dict(super()._handlers())
        send = handlers["sendmessage"]

        async def carried_out(params: dict[str, Any]) -> Any:
            result = send(params)
            if inspect.isawaitable(result):
                result = await result
            if self._hang_after:
                self._hang_after -= 1
                await self._closing.wait()  # sent, never answered
            return result

        handlers["sendmessage"] = carried_out
        return handlers


class TelegramPlatform(PlatformRig):
    name = "telegram"
    capabilities = Capabilities(
        groups=HAS,
        threads=HAS,  # forum topics
        edits=HAS,
        streaming=HAS,
        files=HAS,
        rate_limits=HAS,
        idempotent_sends=Lacks(
            "`sendMessage` takes no idempotency key: a message a kill caught on its way is sent again at "
            "the next start and shows twice if it had arrived (`[delivery] resend_uncertain = false` "
            "records it uncertain instead)"
        ),
        encryption=Lacks(
            "bots can't take part in secret chats; cloud chats are encrypted between each client and "
            "Telegram only"
        ),
    )
    group_key = f"telegram:group:{GROUP}"

    def __init__(self, request: Any, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        self.tg: CarryingTelegram = request.getfixturevalue("tg")
        self.factory = request.getfixturevalue("rig")
        self.live: TelegramRig | None = None
        self.poisoned: int | None = None

    @asynccontextmanager
    async def running(
        self, llm: FakeOpenAI, *, stream: bool = True, configure: Configure | None = None
    ) -> AsyncIterator[None]:
        async with self.factory(llm, stream=stream, configure=configure) as live:
            self.live = live
            with self.started(live.bridge, live.adapter):
                yield

    def _said(self, messages: list[dict[str, Any]]) -> list[Said]:
        files = {(f["chat_id"], f["message_id"]): f for f in self.tg.sent_files}
        said = []
        for m in messages:
            sent = files.get((m["chat_id"], m["message_id"]))
            file = (sent["filename"] or "", sent["data"]) if sent is not None else None
            said.append(Said(str(m["message_id"]), m["text"], 1 + m["edit_count"], file))
        return said

    async def dm(self, text: str) -> None:
        self.tg.dm(OWNER, text)

    def dm_said(self) -> list[Said]:
        return self._said(self.tg.messages_in(OWNER))

    def output_calls(self) -> int:
        return len(self.tg.sent) + len(self.tg.edits) + len(self.tg.chat_actions)

    async def group(self, text: str, *, mention: bool) -> None:
        bot = self.tg.bot_username
        if mention:
            text = f"{text}@{bot}" if text.startswith("/") else f"@{bot} {text}"
        self.tg.group(GROUP, MEMBER, text)

    def group_said(self) -> list[Said]:
        return self._said([m for m in self.tg.messages_in(GROUP) if m["message_thread_id"] is None])

    async def in_thread(self, text: str) -> None:
        self.thread_key = f"telegram:group:{GROUP}:topic:{TOPIC}"
        self.tg.group(
            GROUP, MEMBER, f"@{self.tg.bot_username} {text}", message_thread_id=TOPIC, is_topic_message=True
        )

    def thread_said(self) -> list[Said]:
        return self._said(self.tg.messages_in(GROUP, TOPIC))

    async def dm_file(self, caption: str, name: str, mime: str, data: bytes) -> None:
        if mime.startswith("image/"):
            self.tg.dm(OWNER, None, photo=data, caption=caption)
        else:
            self.tg.dm(OWNER, None, document=(name, mime, data), caption=caption)

    def rate_limit_next_send(self) -> float:
        self.tg.fail_next("sendMessage", "429", retry_after=3)
        return 3.0

    def rate_limit_waits(self) -> list[float]:
        assert self.live is not None
        return list(self.live.waits)  # the adapter's sleeps, recorded instead of slept

    def send_attempts(self) -> int:
        return self.tg.methods().count("sendmessage")

    async def poison(self) -> None:
        # A poll as a Bot API server older than PTB's sends it: PTB can't parse the update.
        self.poisoned = self.tg.push_raw_update(old_server_poll(OWNER, OWNER))["update_id"]

    async def assert_poison_skipped(self, records: list[logging.LogRecord]) -> None:
        skipped = [r.getMessage().split(",")[0] for r in records if "skipped update" in r.getMessage()]
        assert skipped == [f"Telegram: skipped update {self.poisoned}"]
        await self.tg.wait_for(lambda: self.tg.pending_updates == [])  # confirmed: never sent again

    @asynccontextmanager
    async def process(self, llm: FakeOpenAI) -> AsyncIterator[Process]:
        config = telegram_run_config(
            self.tmp_path, OWNER, self.tg.token, self.tg.api_base, llm.base_url, stream=False
        )
        polls = self.tg.methods().count("getupdates")
        async with self.bridge_run(config, lambda: self.tg.methods().count("getupdates") > polls) as process:
            yield process

    def hang_next_send(self) -> None:
        self.tg.hang_after_next_send()
