"""Durable intake on Telegram: an update is confirmed (offset, webhook 200) only once it was stored."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from adapters.telegram import TelegramAdapter, webhook_secret_of
from adapters.telegram.updates import BACKOFF_BASE_S, SECRET_HEADER
from bridge.config.platforms import TelegramSettings
from bridge.errors import AdapterStartError, IntakeUnavailable
from bridge.events import Inbound, Outbound, Route
from devkit.fakes.loopback import closed_port
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import start_bridge, telegram_run_config

OWNER = 42
OTHER = 43
Handler = Callable[[Inbound], Awaitable[None]]


class Recorder:
    """The core's side of intake: records every inbound text, and may block or refuse one."""

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self.stored: list[str] = []
        self.refuse: set[str] = set()  # texts refused once with IntakeUnavailable
        self.hold: dict[str, asyncio.Event] = {}  # texts whose store waits for the event
        self.entered: dict[str, asyncio.Event] = {}

    async def __call__(self, inbound: Inbound) -> None:
        self.attempts.append(inbound.text)
        self.entered.setdefault(inbound.text, asyncio.Event()).set()
        if inbound.text in self.refuse:
            self.refuse.discard(inbound.text)
            raise IntakeUnavailable("database is locked")
        if inbound.text in self.hold:
            await self.hold[inbound.text].wait()
        self.stored.append(inbound.text)

    async def wait_entered(self, text: str, within: float = 5.0) -> None:
        async with asyncio.timeout(within):
            await self.entered.setdefault(text, asyncio.Event()).wait()


class RecordingSleep:
    """Stands in for asyncio.sleep: records each wait, and yields without waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0)


@asynccontextmanager
async def running(
    tg: FakeTelegram,
    handler: Callable[[Inbound], Awaitable[Any]],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    **telegram: Any,
) -> AsyncIterator[TelegramAdapter]:
    """The real TelegramAdapter on the fake, handing every message to `handler`, for the block."""
    telegram.setdefault("poll_timeout_s", 1)
    settings = TelegramSettings(enabled=True, token=tg.token, api_base=tg.api_base, **telegram)
    adapter = TelegramAdapter(settings, sleep=sleep)
    await adapter.start(handler)
    try:
        yield adapter
    finally:
        await adapter.stop()


def webhook_settings(secret: str = "s3cret-token") -> dict[str, Any]:
    port = closed_port()
    return {
        "mode": "webhook",
        "webhook_url": f"http://127.0.0.1:{port}/hook",
        "port": port,
        "webhook_secret": secret,
    }


def update_for(tg: FakeTelegram, user_id: int, text: str, update_id: int) -> dict[str, Any]:
    """A message update as Telegram would POST it to the webhook."""
    return {"update_id": update_id, "message": tg.dm(user_id, text)}


class LogSeen(logging.Handler):
    """An asyncio.Event set once a log record containing `needle` is written."""

    def __init__(self, needle: str) -> None:
        super().__init__()
        self.needle = needle
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.event.set()


# -- polling ----------------------------------------------------------------------------------


async def test_a_batch_is_confirmed_only_after_every_update_in_it_was_stored(tg: FakeTelegram) -> None:
    core = Recorder()
    core.hold["second"] = asyncio.Event()
    tg.dm(OWNER, "first")
    tg.dm(OTHER, "second")
    async with running(tg, core):
        await core.wait_entered("second")
        # The first is stored, the second is not yet: Telegram must still hold both.
        assert core.stored == ["first"]
        assert [u["update_id"] for u in tg.pending_updates] == [1, 2]
        assert tg.get_updates_offsets == [None]  # no confirming getUpdates was sent meanwhile
        core.hold["second"].set()
        await tg.wait_for(lambda: tg.pending_updates == [])
    assert core.stored == ["first", "second"]
    assert tg.get_updates_offsets[1] == 3


async def test_deletewebhook_comes_before_the_first_poll_which_asks_only_for_messages(
    tg: FakeTelegram,
) -> None:
    tg.webhook = {"url": "https://example.invalid/old-hook"}  # left over from an earlier webhook setup
    core = Recorder()
    async with running(tg, core):
        tg.dm(OWNER, "hello")
        await core.wait_entered("hello")
    methods = tg.methods()
    assert methods[:4] == ["getme", "setmycommands", "deletewebhook", "getupdates"]
    [(_, delete)] = [call for call in tg.calls if call[0] == "deletewebhook"]
    assert not delete.get("drop_pending_updates")  # what waited while the webhook was set is kept
    assert all(p["allowed_updates"] == ["message"] for m, p in tg.calls if m == "getupdates")


async def test_an_update_the_core_could_not_store_is_offered_again_without_repeating_the_ones_before(
    tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    core = Recorder()
    core.refuse.add("b")
    sleep = RecordingSleep()
    for text in ("a", "b", "c"):
        tg.dm(OWNER, text)
    async with running(tg, core, sleep):
        await tg.wait_for(lambda: len(core.stored) == 3 and tg.pending_updates == [])
    assert core.attempts == ["a", "b", "b", "c"]
    assert core.stored == ["a", "b", "c"]
    # The next poll started at b, which confirmed a and nothing after it.
    assert tg.get_updates_offsets[:3] == [None, 2, 4]
    assert len(sleep.waits) == 1 and BACKOFF_BASE_S * 0.75 <= sleep.waits[0] <= BACKOFF_BASE_S
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        len(warnings) == 1
        and "storing an update failed" in warnings[0]
        and "database is locked" in warnings[0]
    )


async def test_polling_errors_back_off_with_growing_waits_and_one_log_line_per_streak(
    tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    core = Recorder()
    sleep = RecordingSleep()
    tg.fail_next("getUpdates", "502", times=6)
    tg.dm(OWNER, "after the outage")
    async with running(tg, core, sleep):
        await tg.wait_for(lambda: core.stored == ["after the outage"] and tg.pending_updates == [])
    assert len(sleep.waits) == 6
    assert all(later > earlier for earlier, later in zip(sleep.waits, sleep.waits[1:], strict=False))
    assert sleep.waits[0] <= BACKOFF_BASE_S and sleep.waits[-1] >= BACKOFF_BASE_S * 2**5 * 0.75
    logged = [r for r in caplog.records if r.name.startswith(("adapters", "telegram"))]
    failures = [r.getMessage() for r in logged if r.levelno >= logging.WARNING]
    assert len(failures) == 1 and "Bad Gateway" in failures[0]  # not one per attempt, no PTB traceback
    assert any("recovered after 6 failed attempt(s)" in r.getMessage() for r in logged)


async def test_a_webhook_set_elsewhere_while_polling_is_deleted_and_polling_carries_on(
    tg: FakeTelegram,
) -> None:
    core = Recorder()
    sleep = RecordingSleep()
    async with running(tg, core, sleep):
        await tg.wait_for(lambda: tg.open_polls >= 1)
        tg.webhook = {"url": "https://example.invalid/hook"}  # getUpdates now answers 409 Conflict
        await tg.wait_for(lambda: tg.methods().count("deletewebhook") == 2)
        tg.dm(OWNER, "still heard")
        await tg.wait_for(lambda: core.stored == ["still heard"])
    assert len(sleep.waits) == 1  # one 409, then the webhook was deleted again


async def test_a_token_revoked_while_polling_stops_polling_with_one_clear_error(
    tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    core = Recorder()
    rejected = LogSeen("rejected while polling")
    logging.getLogger("adapters").addHandler(rejected)
    async with running(tg, core) as adapter:
        await tg.wait_for(lambda: tg.open_polls >= 1)
        tg.token = "123456:REVOKED"  # every call with the old token is now 401 Unauthorized
        try:
            async with asyncio.timeout(5):
                await rejected.event.wait()
        finally:
            logging.getLogger("adapters").removeHandler(rejected)
        polls = tg.methods().count("getupdates")
        await asyncio.sleep(1.5)  # a tight loop would show here
        assert tg.methods().count("getupdates") == polls
        await adapter.stop()  # returns, raising nothing, with polling already ended
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "@BotFather" in errors[0].getMessage()


async def test_stop_returns_at_once_during_a_long_poll_and_during_back_off(tg: FakeTelegram) -> None:
    loop = asyncio.get_running_loop()
    async with running(tg, Recorder(), poll_timeout_s=30) as adapter:
        await tg.wait_for(lambda: tg.open_polls >= 1)
        started = loop.time()
        await adapter.stop()
        assert loop.time() - started < 1.0
    tg.fail_next("getUpdates", "502", times=100)
    async with running(tg, Recorder()) as adapter:
        await tg.wait_for(lambda: tg.methods().count("getupdates") >= 4, timeout=10)  # now backing off
        started = loop.time()
        await adapter.stop()
        assert loop.time() - started < 1.0


async def test_bridge_run_exits_0_on_sigterm_while_polling_backs_off(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    async with FakeOpenAI() as llm:
        config = telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, llm.base_url)
        tg.fail_next("getUpdates", "502", times=1000)
        process = await start_bridge(tmp_path, "run", "--config", str(config))
        try:
            await tg.wait_for(lambda: tg.methods().count("getupdates") >= 3, timeout=30)
            loop = asyncio.get_running_loop()
            started = loop.time()
            process.send_signal(signal.SIGTERM)
            _, stderr_bytes = await asyncio.wait_for(process.communicate(), timeout=10)
            elapsed = loop.time() - started
        finally:
            if process.returncode is None:
                process.kill()
    stderr = stderr_bytes.decode()
    assert process.returncode == 0, stderr
    assert elapsed < 5
    assert stderr.count("polling (getUpdates) failed") == 1, stderr  # one line for the whole streak
    assert "Traceback" not in stderr


async def test_updates_taken_just_before_stop_are_confirmed_by_it(tg: FakeTelegram) -> None:
    core = Recorder()
    core.hold["last"] = asyncio.Event()
    async with running(tg, core) as adapter:
        tg.dm(OWNER, "last")
        await core.wait_entered("last")
        stopping = asyncio.create_task(adapter.stop())
        await asyncio.sleep(0.05)
        core.hold["last"].set()  # stored within stop's grace period
        await stopping
    assert core.stored == ["last"]
    assert tg.pending_updates == []


async def test_the_handlers_future_is_not_awaited(tg: FakeTelegram) -> None:
    run_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def core(inbound: Inbound) -> asyncio.Future[None]:
        seen.append(inbound.text)
        return run_done  # the run answering it: never finishes in this test

    async with running(tg, core):
        tg.dm(OWNER, "one")
        tg.dm(OWNER, "two")
        await tg.wait_for(lambda: seen == ["one", "two"] and tg.pending_updates == [])
    run_done.cancel()


# -- webhook ----------------------------------------------------------------------------------


async def test_the_webhook_answers_200_only_after_the_update_was_stored(tg: FakeTelegram) -> None:
    core = Recorder()
    core.hold["hello"] = asyncio.Event()
    hook = webhook_settings()
    async with running(tg, core, **hook), aiohttp.ClientSession() as http:
        assert tg.webhook is not None and tg.webhook["allowed_updates"] == ["message"]
        update = update_for(tg, OWNER, "hello", 900001)
        posting = asyncio.create_task(
            http.post(hook["webhook_url"], json=update, headers={SECRET_HEADER: "s3cret-token"})
        )
        await core.wait_entered("hello")
        await asyncio.sleep(0.1)
        assert not posting.done()  # the request stays open while the store is under way
        core.hold["hello"].set()
        async with await posting as answer:
            assert answer.status == 200
    assert core.stored == ["hello"]
    assert tg.webhook is not None  # stop leaves the webhook registered, as PTB does


async def test_the_webhook_refuses_a_request_without_the_right_secret(tg: FakeTelegram) -> None:
    core = Recorder()
    hook = webhook_settings()
    async with running(tg, core, **hook), aiohttp.ClientSession() as http:
        update = update_for(tg, OWNER, "forged", 900002)
        for headers in ({}, {SECRET_HEADER: "wrong"}, {SECRET_HEADER: "s3cret-token-and-more"}):
            async with http.post(hook["webhook_url"], json=update, headers=headers) as answer:
                assert answer.status == 403
    assert core.attempts == []


async def test_the_webhook_answers_500_when_the_core_could_not_store_so_telegram_sends_it_again(
    tg: FakeTelegram,
) -> None:
    core = Recorder()
    core.refuse.add("retry me")
    hook = webhook_settings()
    async with running(tg, core, **hook), aiohttp.ClientSession() as http:
        update = update_for(tg, OWNER, "retry me", 900003)
        statuses = []
        for _ in range(2):  # Telegram's own retry
            async with http.post(
                hook["webhook_url"], json=update, headers={SECRET_HEADER: "s3cret-token"}
            ) as answer:
                statuses.append(answer.status)
    assert statuses == [500, 200]
    assert core.stored == ["retry me"]


async def test_a_port_already_in_use_is_one_clear_start_error(tg: FakeTelegram) -> None:
    hook = webhook_settings()
    async with running(tg, Recorder(), **hook):
        settings = TelegramSettings(enabled=True, token=tg.token, api_base=tg.api_base, **hook)
        second = TelegramAdapter(settings)
        with pytest.raises(AdapterStartError, match="Can't listen on"):
            await second.start(Recorder())
        await second.stop()


async def test_workers_of_one_bot_register_one_default_secret_so_either_takes_telegrams_updates(
    tg: FakeTelegram,
) -> None:
    """Issue 30, break 5: with no webhook_secret set, each worker drew its own; Telegram keeps the last
    one registered, so the others answered 403. Now it is derived from the token: the same in each."""
    cores = [Recorder(), Recorder()]
    settings = [webhook_settings(secret="") for _ in cores]
    async with (
        running(tg, cores[0], **settings[0]),
        running(tg, cores[1], **settings[1]),
        aiohttp.ClientSession() as http,
    ):
        registered = [params["secret_token"] for method, params in tg.calls if method == "setwebhook"]
        assert len(registered) == 2 and registered[0] == registered[1]
        secret = registered[0]
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret) and tg.token not in secret
        # Telegram sends each update with the secret it kept, to whichever worker the proxy picks.
        for n, (hook, core) in enumerate(zip(settings, cores, strict=True)):
            update = update_for(tg, OWNER, f"to worker {n}", 900_100 + n)
            async with http.post(hook["webhook_url"], json=update, headers={SECRET_HEADER: secret}) as answer:
                assert answer.status == 200
            assert core.stored == [f"to worker {n}"]
    # Another bot's token gives another secret.
    assert webhook_secret_of(tg.token) == secret != webhook_secret_of(tg.token + "x")


# -- outbound pieces --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["reply", "notice"])
async def test_each_piece_split_returns_is_sent_as_exactly_one_message(tg: FakeTelegram, kind: str) -> None:
    table = "| a | b | c |\n|---|---|---|\n" + "".join(f"| {i} | x | {'y' * (i % 7)} |\n" for i in range(300))
    text = "Intro 😀\n\n```python\n" + "\n".join(f"v{i} = {i}" for i in range(700)) + "\n```\n\n" + table
    async with running(tg, Recorder()) as adapter:
        pieces = adapter.split(kind, text)
        assert len(pieces) >= 3
        for piece in pieces:
            assert adapter.split(kind, piece) == [piece]
            await adapter.send(Outbound(Route("telegram", str(OWNER)), kind, piece))  # type: ignore[arg-type]
    assert len(tg.messages_in(OWNER)) == len(pieces)
