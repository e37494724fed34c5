"""Relay: the suite's example third-party plugin (tests/platforms/thirdparty), loaded through its
`bridge.adapters` entry point exactly as the core loads any adapter, on its fake service."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bridge.app import Bridge
from bridge.app.root import load_adapter_class
from devkit.fakes.openai_server import FakeOpenAI
from devkit.processes import bridge_env
from tests.harness import make_settings
from tests.platforms.rig import HAS, Capabilities, Configure, Lacks, PlatformRig, Process, Said
from tests.platforms.thirdparty.fake_relay import FakeRelay
from tests.waiting import eventually

OWNER = "alice"
MEMBER = "bob"
TEAM = "team"
REPO = Path(__file__).resolve().parents[3]


class RelayPlatform(PlatformRig):
    name = "relay"
    in_matrix = False  # the suite's example, not a platform Bridge ships
    capabilities = Capabilities(
        groups=HAS,
        threads=Lacks("Relay has no threads"),
        edits=Lacks("Relay can't edit a message: tool activity is one message per finished tool"),
        streaming=Lacks("without edits there is no draft to grow: each reply is sent whole"),
        files=Lacks(
            "Relay carries text only: no attachment arrives, and a file the agent sends arrives as its "
            "caption with the file named"
        ),
        rate_limits=HAS,
        idempotent_sends=HAS,  # a key per message
        encryption=Lacks("Relay has no encryption"),
    )
    group_key = f"relay:group:{TEAM}"

    def __init__(self, request: Any, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        self.relay: FakeRelay = request.getfixturevalue("relay")
        self.site: Path = request.getfixturevalue("relay_plugin")
        self.waits: list[float] = []
        self.poisoned: int | None = None

    @asynccontextmanager
    async def running(
        self, llm: FakeOpenAI, *, stream: bool = True, configure: Configure | None = None
    ) -> AsyncIterator[None]:
        settings = make_settings(self.tmp_path, llm.base_url, owners=[f"relay:{OWNER}"])
        settings.llm.stream = stream
        if configure is not None:
            configure(settings)

        async def no_wait(seconds: float) -> None:
            self.waits.append(seconds)

        adapter = load_adapter_class("relay")(self.relay.api_base, self.relay.token, sleep=no_wait)
        async with Bridge(settings) as bridge:
            bridge.add_sender(adapter)
            await adapter.start(bridge.handle)
            try:
                with self.started(bridge, adapter):
                    yield
            finally:
                await adapter.stop()

    def _said(self, chat: str) -> list[Said]:
        return [Said(m["id"], m["text"]) for m in self.relay.messages_in(chat)]

    async def dm(self, text: str) -> None:
        self.relay.dm(OWNER, text)

    def dm_said(self) -> list[Said]:
        return self._said(f"dm-{OWNER}")

    def output_calls(self) -> int:
        return len(self.relay.post_requests)

    async def group(self, text: str, *, mention: bool) -> None:
        self.relay.group(TEAM, MEMBER, text, mention=mention)

    def group_said(self) -> list[Said]:
        return self._said(TEAM)

    def rate_limit_next_send(self) -> float:
        self.relay.rate_limit_next_post(2)
        return 2.0

    def rate_limit_waits(self) -> list[float]:
        return list(self.waits)

    def send_attempts(self) -> int:
        return len(self.relay.post_requests)

    async def poison(self) -> None:
        self.relay.push_raw({"message": {"id": "x", "chat": "not an object"}})
        self.poisoned = self.relay.pending[-1]["update_id"]

    async def assert_poison_skipped(self, records: list[logging.LogRecord]) -> None:
        skipped = [r.getMessage() for r in records if "skipped update" in r.getMessage()]
        assert skipped == [f"Relay: skipped update {self.poisoned}"]
        await self.relay.wait_for(lambda: self.relay.pending == [])  # confirmed: never sent again

    @asynccontextmanager
    async def process(self, llm: FakeOpenAI) -> AsyncIterator[Process]:
        config = self.config_file(llm, f"relay:{OWNER}", "")
        env = bridge_env(
            PYTHONPATH=os.pathsep.join([str(REPO), str(self.site)]),
            RELAY_API_BASE=self.relay.api_base,
            RELAY_TOKEN=self.relay.token,
        )
        polls = self.relay.polls
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.platforms.thirdparty.run",
            "--config",
            str(config),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.tmp_path,
            env=env,
        )
        try:
            await eventually(
                lambda: self.relay.polls > polls or process.returncode is not None, "relay: polling"
            )
            if process.returncode is not None:
                assert process.stderr is not None
                raise AssertionError((await process.stderr.read()).decode()[-2000:])
            yield process
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()

    def hang_next_send(self) -> None:
        self.relay.hang_after_next_post()
