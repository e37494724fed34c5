"""The Bot API on aiohttp (adapters/telegram/transport.py), over the fake Bot API: sends, uploads,
timeouts that may have arrived against those that surely did not, flood control, proxies."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from telegram import Bot, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import TimedOut

from adapters.telegram import TelegramAdapter
from adapters.telegram.retrying import classify, refusals
from adapters.telegram.transport import AiohttpRequest
from bridge.errors import DeliveryUncertain
from bridge.events import Outbound, Route
from bridge.retry import RETRY, Verdict
from devkit.fakes.loopback import closed_port
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.conftest import OWNER, telegram_settings


def bot_on(tg: FakeTelegram, request: AiohttpRequest, api_base: str | None = None) -> Bot:
    base = api_base or tg.api_base
    return Bot(tg.token, base_url=f"{base}/bot", base_file_url=f"{base}/file/bot", request=request)


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    async with bot_on(tg, AiohttpRequest()) as started:
        yield started


async def test_a_message_goes_with_its_markup_and_reply_and_comes_back_parsed(
    tg: FakeTelegram, bot: Bot
) -> None:
    asked = tg.dm(OWNER, "hi")
    sent = await bot.send_message(
        OWNER,
        "<b>bold</b> &amp; «ünïcode» 🙂",
        parse_mode=ParseMode.HTML,
        reply_parameters=ReplyParameters(message_id=asked["message_id"]),
    )
    [record] = tg.sent
    assert record["text"] == "bold & «ünïcode» 🙂"
    assert record["entities"] == [{"type": "bold", "offset": 0, "length": 4}]
    assert record["reply_to_message_id"] == asked["message_id"]
    assert sent.message_id == record["message_id"] and sent.chat.id == OWNER


async def test_a_file_is_uploaded_whole_with_its_name_type_and_caption(tg: FakeTelegram, bot: Bot) -> None:
    data = bytes(range(256)) * 4000  # 1 MB, every byte value
    sent = await bot.send_document(
        OWNER, data, filename='résumé "final".pdf', caption="the CV", disable_content_type_detection=True
    )
    [upload] = tg.sent_files
    assert upload["data"] == data and upload["source"] == "upload"
    # Unquoted, as Telegram shows it: percent-encoding would reach the chat.
    assert upload["filename"] == 'résumé "final".pdf'
    assert upload["content_type"] == "application/pdf"
    assert upload["caption"] == "the CV" and sent.document is not None


async def test_a_send_with_no_answer_in_time_may_have_arrived_and_is_not_sent_again(
    tg: FakeTelegram,
) -> None:
    tg.fail_next("sendMessage", "hang")
    async with bot_on(tg, AiohttpRequest(read_timeout=0.3)) as bot:
        with pytest.raises(TimedOut) as raised:
            await bot.send_message(OWNER, "did it arrive?")
        assert classify(raised.value) == Verdict(True, may_have_arrived=True)
        with pytest.raises(DeliveryUncertain, match="may have arrived"), refusals():
            raise raised.value
    assert tg.methods().count("sendmessage") == 1


async def test_a_send_that_waited_too_long_for_a_connection_surely_never_left(tg: FakeTelegram) -> None:
    tg.fail_next("sendMessage", "hang")
    # One connection, held by a send Telegram never answers: the next send can't get one in time.
    async with bot_on(tg, AiohttpRequest(connections=1, read_timeout=5, pool_timeout=0.2)) as bot:
        first = asyncio.create_task(bot.send_message(OWNER, "first"))
        await tg.wait_for(lambda: tg.methods().count("sendmessage") == 1)
        with pytest.raises(TimedOut, match=r"\*not\* sent") as raised:
            await bot.send_message(OWNER, "second")
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
    assert classify(raised.value) == RETRY  # safe to send again: Telegram never saw it
    with pytest.raises(TimedOut), refusals():  # and it is no uncertain delivery
        raise raised.value
    assert [p.get("text") for m, p in tg.calls if m == "sendmessage"] == ["first"]


async def test_flood_control_is_waited_out_as_telegram_asks_then_the_message_goes_once(
    tmp_path: Path, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    adapter = TelegramAdapter(telegram_settings(tmp_path, tg, fake_llm).telegram, sleep=sleep)
    await adapter.start_sending()
    try:
        tg.fail_next("sendMessage", "429", retry_after=3)
        route = Route("telegram", str(OWNER))
        sent = await adapter.send(Outbound(route=route, text="after the wait", kind="notice"))
    finally:
        await adapter.stop()
    assert waits == [3.0]
    [record] = tg.sent
    assert record["text"] == "after the wait" and sent == str(record["message_id"])


async def test_requests_go_through_the_proxy_the_environment_names_unless_no_proxy_exempts_the_host(
    tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The "proxy" is the fake itself: a host no resolver knows is reached only through it.
    monkeypatch.setenv("HTTP_PROXY", tg.api_base)
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.setenv("NO_PROXY", "localhost")
    monkeypatch.setenv("no_proxy", "localhost")
    async with bot_on(tg, AiohttpRequest(), api_base="http://api.telegram.invalid") as bot:
        me = await bot.get_me()
    assert me.username == tg.bot_username
    # NO_PROXY=127.0.0.1 sends straight to the host, past a proxy that would refuse everything.
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    async with bot_on(tg, AiohttpRequest()) as bot:
        me = await bot.get_me()
    assert me.username == tg.bot_username
