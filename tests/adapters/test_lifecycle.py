"""The adapter lifecycle of adapters/base.py, enforced by the core's guard around every adapter."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from adapters.base import Adapter
from adapters.console import ConsoleAdapter
from adapters.discord import DiscordAdapter
from adapters.telegram import TelegramAdapter
from bridge.app import Bridge
from bridge.errors import AdapterLifecycleError, AdapterStartError, Unsupported
from bridge.events import Attachment, Inbound, Outbound, OutFile, Route
from bridge.gateway.lifecycle import GuardedAdapter
from tests.harness import make_settings

ROUTE = Route("fake", "chat-1")
TEXT = "hello big world, and then a few more words"


class FakeAdapter(Adapter):
    """A platform that records every call it gets; `text_limit` only, none of the other optional hooks."""

    surface = "fake"
    supports_edit = True
    text_limit = 16

    def __init__(self, *, fail_start: bool = False) -> None:
        self.calls: list[str] = []
        self.sent: list[str] = []
        self.fail_start = fail_start
        self._ids = itertools.count(1)

    @classmethod
    def from_settings(cls, settings: Any) -> FakeAdapter:
        return cls()

    async def start(self, handler: Any) -> None:
        self.calls.append("start")
        if self.fail_start:
            raise AdapterStartError("the fake platform is down")

    async def stop(self) -> None:
        self.calls.append("stop")

    async def send(self, item: Outbound) -> str | None:
        self.calls.append("send")
        self.sent.append(item.text)
        return str(next(self._ids))

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        self.calls.append("edit")

    async def typing(self, route: Route) -> None:
        self.calls.append("typing")


async def ignore(_inbound: Inbound) -> None:
    return None


def test_every_built_in_adapter_implements_the_plugin_protocol() -> None:
    # Checked by mypy (these assignments fail to type-check if a class drifts from the protocol),
    # and at run time for the members the core calls.
    classes: list[type[Adapter]] = [ConsoleAdapter, TelegramAdapter, DiscordAdapter]
    for cls in classes:
        for member in ("surface", "supports_edit", "from_settings", "start", "stop", "send", "edit"):
            assert hasattr(cls, member), f"{cls.__name__} lacks {member}"


async def test_starting_twice_is_refused_and_the_adapter_starts_once() -> None:
    fake = FakeAdapter()
    guarded = GuardedAdapter(fake)
    await guarded.start(ignore)
    with pytest.raises(AdapterLifecycleError, match="cannot start: it is running"):
        await guarded.start(ignore)
    assert fake.calls == ["start"]


async def test_starting_after_stop_is_refused() -> None:
    fake = FakeAdapter()
    guarded = GuardedAdapter(fake)
    await guarded.start(ignore)
    await guarded.stop()
    with pytest.raises(AdapterLifecycleError, match="it is stopped"):
        await guarded.start(ignore)
    assert fake.calls == ["start", "stop"]


@pytest.mark.parametrize("stopped", [False, True], ids=["before start", "after stop"])
async def test_sending_editing_or_typing_outside_start_and_stop_is_refused_without_touching_the_platform(
    stopped: bool,
) -> None:
    fake = FakeAdapter()
    guarded = GuardedAdapter(fake)
    if stopped:
        await guarded.start(ignore)
        await guarded.stop()
    when = "after stop" if stopped else "before start"
    with pytest.raises(AdapterLifecycleError, match=f"send on the fake adapter {when}"):
        await guarded.send(Outbound(ROUTE, "reply", "hi"))
    with pytest.raises(AdapterLifecycleError, match=f"edit on the fake adapter {when}"):
        await guarded.edit(ROUTE, "1", "hi")
    with pytest.raises(AdapterLifecycleError, match=f"typing on the fake adapter {when}"):
        await guarded.typing(ROUTE)
    assert "send" not in fake.calls and "edit" not in fake.calls and "typing" not in fake.calls


async def test_a_running_adapter_sends_edits_and_types() -> None:
    fake = FakeAdapter()
    guarded = GuardedAdapter(fake)
    await guarded.start(ignore)
    assert await guarded.send(Outbound(ROUTE, "reply", "hi")) == "1"
    await guarded.edit(ROUTE, "1", "hi!")
    await guarded.typing(ROUTE)
    assert fake.calls == ["start", "send", "edit", "typing"]


async def test_sends_are_allowed_while_start_is_still_running() -> None:
    # An adapter delivers messages before its start returns (Discord waits for READY); their answers
    # must not be refused.
    release = asyncio.Event()

    class SlowStart(FakeAdapter):
        async def start(self, handler: Any) -> None:
            await release.wait()

    guarded = GuardedAdapter(SlowStart())
    starting = asyncio.create_task(guarded.start(ignore))
    await asyncio.sleep(0)
    assert await guarded.send(Outbound(ROUTE, "reply", "early")) == "1"
    release.set()
    await starting
    assert guarded.state == "running"


async def test_stop_is_idempotent_and_a_no_op_before_start() -> None:
    never_started = FakeAdapter()
    await GuardedAdapter(never_started).stop()
    assert never_started.calls == []

    fake = FakeAdapter()
    guarded = GuardedAdapter(fake)
    await guarded.start(ignore)
    await guarded.stop()
    await guarded.stop()
    assert fake.calls == ["start", "stop"]


async def test_a_failed_start_leaves_the_adapter_stopped_and_its_error_unchanged() -> None:
    fake = FakeAdapter(fail_start=True)
    guarded = GuardedAdapter(fake)
    with pytest.raises(AdapterStartError, match="the fake platform is down"):
        await guarded.start(ignore)
    assert guarded.state == "stopped"
    await guarded.stop()  # the shutdown path still calls it: harmless, and the adapter is not stopped twice
    with pytest.raises(AdapterLifecycleError):
        await guarded.start(ignore)
    assert fake.calls == ["start"]


def test_capabilities_pass_through_and_undeclared_ones_keep_the_contracts_defaults() -> None:
    guarded = GuardedAdapter(FakeAdapter())
    assert guarded.surface == "fake" and guarded.supports_edit is True
    assert guarded.text_limit == 16
    # Declared once, in bridge.platform: what an adapter leaves out reads as "can't", never as missing.
    assert guarded.split("reply", TEXT) == ["hello big world,", "and then a few", "more words"]
    assert guarded.dedupes_by_nonce is False and guarded.streams_drafts is False
    assert guarded.min_edit_interval_s == 0.0 and guarded.max_upload_bytes is None


async def test_an_adapter_that_cannot_send_without_listening_says_so_and_can_still_start() -> None:
    # platforms.start_shared asks, and on Unsupported leaves the chats to the worker that listens.
    guarded = GuardedAdapter(FakeAdapter())
    with pytest.raises(Unsupported, match="fake cannot send without listening"):
        await guarded.start_sending()
    assert guarded.state == "new"
    await guarded.start(ignore)
    assert guarded.state == "running"


async def test_the_optional_operations_are_refused_outside_start_and_stop_too() -> None:
    fake = FakeAdapter()
    guarded = GuardedAdapter(fake)
    item = Outbound(ROUTE, "reply", "caption", file=OutFile("a.txt", "/nonexistent", 1))
    with pytest.raises(AdapterLifecycleError, match="send_file on the fake adapter before start"):
        await guarded.send_file(item)
    with pytest.raises(AdapterLifecycleError, match="edit on the fake adapter before start"):
        await guarded.edit_reply(ROUTE, "1", "hi")
    with pytest.raises(AdapterLifecycleError, match="download on the fake adapter before start"):
        await guarded.download(Attachment("image", "a.png", "ref"), 10)
    await guarded.start(ignore)
    # Running, the defaults of the contract answer: a file goes as its caption with the name.
    assert await guarded.send_file(item) == "1"
    assert fake.sent == ["caption\n📎 a.txt (this chat can't receive files)"]
    with pytest.raises(Unsupported):
        await guarded.download(Attachment("image", "a.png", "ref"), 10)


def test_the_real_adapters_optional_hooks_reach_the_core_through_the_guard(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1")
    discord = GuardedAdapter(DiscordAdapter.from_settings(settings))
    assert discord.dedupes_by_nonce is True and discord.split("reply", "a b") == ["a b"]
    telegram = GuardedAdapter(TelegramAdapter.from_settings(settings))
    assert telegram.min_edit_interval_s == 1.0 and telegram.dedupes_by_nonce is False


async def test_a_send_after_stop_leaves_its_rows_pending_and_the_next_start_delivers_them(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, "http://127.0.0.1:9/v1")
    first = FakeAdapter()
    guarded = GuardedAdapter(first)
    async with Bridge(settings) as bridge:
        bridge.add_sender(guarded)
        await guarded.start(ignore)
        await guarded.stop()
        # Split in parts at text_limit 16: none may be marked failed, none sent.
        assert await bridge.delivery.send(Outbound(ROUTE, "notice", TEXT)) is None
        rows = await bridge.store.outbox()
        assert len(rows) >= 3 and {row.item.state for row in rows} == {"pending"}
    assert first.sent == []

    second = FakeAdapter()
    restarted = GuardedAdapter(second)
    async with Bridge(settings) as bridge:
        bridge.add_sender(restarted)
        await restarted.start(ignore)
        await bridge.recover()
        rows = await bridge.store.outbox()
        assert {row.item.state for row in rows} == {"sent"}
    assert " ".join(second.sent) == TEXT
