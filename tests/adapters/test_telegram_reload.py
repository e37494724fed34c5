"""Live reload in a real `bridge run` process: config edits and SIGHUP change the policy and access lists."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import start_bridge
from tests.adapters.conftest import GROUP, OWNER

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGHUP and SIGTERM")

MEMBER = 5
FRIEND = 555
OTHER_GROUP = -100999
MENTION = "@bridge_test_bot"
GROUP_KEY = f"telegram:group:{GROUP}"
RELOADED = "config reloaded"
HELD_BACK = f"reply for {GROUP_KEY} suppressed by rule 1 (deny: surface=telegram, chat_type=group)"
ALLOW_ALL = "rules = []"
DENY_GROUPS = 'rules = [{ action = "deny", match = { surface = "telegram", chat_type = "group" } }]'
BROKEN = 'rules = [{ action = "silence", match = { surface = "telegram", chat_type = "group" } }]'
STARTUP_S = 30.0  # a cold interpreter importing PTB can be slow on a loaded machine
RELOAD_S = 10.0  # the watcher polls once a second


def echo(body: dict[str, object]) -> Reply:
    messages = body["messages"]
    assert isinstance(messages, list)
    return fake.text(f"re: {messages[-1]['content']}")


@dataclass
class Config:
    """The config file of one `bridge run`; each write replaces the file whole (never half-written)."""

    path: Path
    tmp_path: Path
    tg: FakeTelegram
    llm: FakeOpenAI

    def write(
        self,
        *,
        rules: str = ALLOW_ALL,
        allowed_users: str = "[]",
        allowed_chats: str = "",
        require_mention: str = "true",
    ) -> None:
        chats = allowed_chats or f'["{GROUP}"]'
        text = (
            f'owners = ["telegram:{OWNER}"]\n'
            f'[llm]\nbase_url = "{self.llm.base_url}"\nmodel = "fake"\nmax_retries = 0\n'
            f'[storage]\npath = "{self.tmp_path / "bridge.db"}"\n'
            f'[telegram]\nenabled = true\ntoken = "{self.tg.token}"\napi_base = "{self.tg.api_base}"\n'
            f"poll_timeout_s = 5\nallowed_chats = {chats}\nallowed_users = {allowed_users}\n"
            f"require_mention = {require_mention}\n"
            f'[session.send_policy]\ndefault = "allow"\n{rules}\n'
        )
        staged = self.path.with_suffix(".tmp")
        staged.write_text(text, encoding="utf-8")
        os.replace(staged, self.path)


@dataclass
class StderrLog:
    """The process's stderr, read as it comes, so a test can wait for a log line."""

    text: str = ""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.text += line.decode("utf-8", "replace")
            self._changed.set()
            self._changed = asyncio.Event()

    def count(self, needle: str) -> int:
        return self.text.count(needle)

    async def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = RELOAD_S) -> None:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout):
                while not predicate():
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"after {timeout} s still no {what}; stderr:\n{self.text}") from None

    async def wait_count(self, needle: str, n: int, timeout: float = RELOAD_S) -> None:  # noqa: ASYNC109
        await self.wait_for(lambda: self.count(needle) >= n, f"{n}x {needle!r}", timeout)


@dataclass
class Running:
    process: asyncio.subprocess.Process
    log: StderrLog
    config: Config


@asynccontextmanager
async def bridge_run(config: Config) -> AsyncIterator[Running]:
    """`bridge run --config FILE` until the block ends; then SIGTERM, and it must exit cleanly."""
    process = await start_bridge(config.tmp_path, "run", "--config", str(config.path))
    assert process.stderr is not None
    log = StderrLog()
    reader = asyncio.create_task(log.read(process.stderr))
    try:
        await log.wait_for(lambda: "running: telegram" in log.text, "startup", STARTUP_S)
        yield Running(process, log, config)
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 10)
        await asyncio.wait_for(reader, 5)
        assert process.returncode == 0, log.text
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


@pytest.fixture
async def config(tmp_path: Path, tg: FakeTelegram) -> AsyncIterator[Config]:
    async with FakeOpenAI(echo) as llm:
        yield Config(tmp_path / "config.toml", tmp_path, tg, llm)


def texts_in(tg: FakeTelegram, chat_id: int) -> list[str]:
    return [m["text"] for m in tg.messages_in(chat_id)]


def asked(llm: FakeOpenAI, text: str) -> bool:
    return any(body["messages"][-1]["content"] == text for body in llm.requests)


async def test_a_config_edit_denies_a_group_live_and_a_broken_edit_keeps_the_last_good_policy(
    config: Config, tg: FakeTelegram
) -> None:
    config.write()
    async with bridge_run(config) as bot:
        tg.group(GROUP, MEMBER, f"{MENTION} one")
        await tg.wait_for(lambda: "re: one" in texts_in(tg, GROUP), 10)

        # Deny the group in the file: the running bot picks it up within a poll or two.
        config.write(rules=DENY_GROUPS)
        await bot.log.wait_count(RELOADED, 1)
        tg.group(GROUP, MEMBER, f"{MENTION} two")
        await bot.log.wait_count(HELD_BACK, 1)
        assert asked(config.llm, "two")  # shadow mode: read and answered in history...
        assert "re: two" not in texts_in(tg, GROUP)  # ...but not said in the group

        # A broken edit: one error naming the key, and the deny rule stays in force.
        config.write(rules=BROKEN)
        await bot.log.wait_count("config reload failed", 1)
        tg.group(GROUP, MEMBER, f"{MENTION} three")
        await bot.log.wait_count(HELD_BACK, 2)
        assert asked(config.llm, "three") and "re: three" not in texts_in(tg, GROUP)

        # Fixed file plus SIGHUP: the group is allowed again.
        config.write()
        bot.process.send_signal(signal.SIGHUP)
        await bot.log.wait_count(RELOADED, 2)
        tg.group(GROUP, MEMBER, f"{MENTION} four")
        await tg.wait_for(lambda: "re: four" in texts_in(tg, GROUP), 10)
        stderr = bot.log.text
    assert texts_in(tg, GROUP) == ["re: one", "re: four"]
    errors = [line for line in stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "bridge.reload" in errors[0], stderr
    assert "config reload failed; keeping the last good settings" in errors[0]
    assert f"{config.path}: session.send_policy.rules[0].action: " in stderr
    assert "apply after a restart" not in stderr  # only live settings changed


async def test_sighup_reloads_the_config_even_when_the_file_did_not_change(
    config: Config, tg: FakeTelegram
) -> None:
    config.write()
    async with bridge_run(config) as bot:
        bot.process.send_signal(signal.SIGHUP)
        await bot.log.wait_count(RELOADED, 1)
        bot.process.send_signal(signal.SIGHUP)
        await bot.log.wait_count(RELOADED, 2)
        # Still serving after the reloads.
        tg.dm(OWNER, "still there?")
        await tg.wait_for(lambda: "re: still there?" in texts_in(tg, OWNER), 10)
    assert bot.process.returncode == 0


async def test_access_list_edits_take_effect_without_a_restart(config: Config, tg: FakeTelegram) -> None:
    config.write()
    async with bridge_run(config) as bot:
        tg.group(OTHER_GROUP, MEMBER, f"{MENTION} anyone?")
        tg.group(GROUP, MEMBER, "chatting without a mention")
        tg.dm(FRIEND, "hello?")
        # Updates are handled in order: once the friend is refused, both group messages were seen.
        await tg.wait_for(lambda: len(tg.messages_in(FRIEND)) >= 1, 10)
        assert "allowed" in texts_in(tg, FRIEND)[0] and str(FRIEND) in texts_in(tg, FRIEND)[0]
        assert texts_in(tg, OTHER_GROUP) == [] and texts_in(tg, GROUP) == [] and config.llm.requests == []

        config.write(
            allowed_users=f'["{FRIEND}"]',
            allowed_chats=f'["{GROUP}", "{OTHER_GROUP}"]',
            require_mention="false",
        )
        await bot.log.wait_count(RELOADED, 1)
        tg.dm(FRIEND, "let me in now")
        tg.group(OTHER_GROUP, MEMBER, f"{MENTION} and now?")
        tg.group(GROUP, MEMBER, "no mention needed now")
        await tg.wait_for(lambda: "re: let me in now" in texts_in(tg, FRIEND), 10)
        await tg.wait_for(lambda: "re: and now?" in texts_in(tg, OTHER_GROUP), 10)
        await tg.wait_for(lambda: "re: no mention needed now" in texts_in(tg, GROUP), 10)
        stderr = bot.log.text
    assert len(tg.messages_in(FRIEND)) == 2
    assert "apply after a restart" not in stderr
