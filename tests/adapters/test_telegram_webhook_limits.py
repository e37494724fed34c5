"""The Telegram webhook's server has the admin server's connection limits (bridge/serving.py; issue 30,
break 11): half-open connections past [telegram] webhook_max_connections make room, a header that
does not come within webhook_header_timeout_s closes its connection, and Telegram's own requests,
even held open while the core stores them, are never what makes room."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from adapters.telegram.updates import SECRET_HEADER
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.test_telegram_intake import OWNER, Recorder, running, update_for, webhook_settings
from tests.rawhttp import HALF_HEADER, SILENT, count_closed, holding

SERVING_LOG = "bridge.serving"
SECRET = "s3cret-token"
CAP = 20


def serving_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == SERVING_LOG]


async def test_half_open_connections_past_the_cap_make_room_for_telegrams_posts(
    tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=SERVING_LOG)
    core = Recorder()
    hook = webhook_settings(SECRET)
    port = urlsplit(hook["webhook_url"]).port
    assert port is not None
    limits: dict[str, Any] = {"webhook_max_connections": CAP, "webhook_header_timeout_s": 120}
    async with (
        running(tg, core, **hook, **limits) as adapter,
        aiohttp.ClientSession() as http,
        holding(port, [SILENT, HALF_HEADER] * CAP) as held,
    ):
        update = update_for(tg, OWNER, "through the crowd", 910001)
        async with (
            asyncio.timeout(5),
            http.post(hook["webhook_url"], json=update, headers={SECRET_HEADER: SECRET}) as answer,
        ):
            assert answer.status == 200
        oldest = held[: len(held) - CAP]
        assert await count_closed(oldest, within=5) == len(oldest)
        assert adapter._webhook is not None and adapter._webhook.open_connections <= CAP
    assert core.stored == ["through the crowd"]
    lines = serving_lines(caplog)
    assert len(lines) == 1, lines
    assert "Telegram webhook server" in lines[0] and "[telegram] webhook_max_connections" in lines[0]


async def test_a_webhook_connection_without_a_whole_header_in_time_is_closed(tg: FakeTelegram) -> None:
    hook = webhook_settings(SECRET)
    port = urlsplit(hook["webhook_url"]).port
    assert port is not None
    async with (
        running(tg, Recorder(), **hook, webhook_header_timeout_s=0.5),
        holding(port, [SILENT, HALF_HEADER]) as held,
    ):
        assert await count_closed(held, within=5) == len(held)


async def test_posts_held_open_while_stored_are_never_closed_to_make_room(
    tg: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=SERVING_LOG)
    cap = 3
    core = Recorder()
    hook = webhook_settings(SECRET)
    port = urlsplit(hook["webhook_url"]).port
    assert port is not None
    texts = [f"slow {n}" for n in range(cap)]
    for text in texts:
        core.hold[text] = asyncio.Event()
    async with (
        running(tg, core, **hook, webhook_max_connections=cap, webhook_header_timeout_s=120),
        aiohttp.ClientSession() as http,
    ):

        async def post(n: int, text: str) -> int:
            update = update_for(tg, OWNER, text, 920000 + n)
            async with http.post(hook["webhook_url"], json=update, headers={SECRET_HEADER: SECRET}) as answer:
                return answer.status

        posting = [asyncio.create_task(post(n, text)) for n, text in enumerate(texts)]
        for text in texts:
            await core.wait_entered(text)
        async with holding(port, [SILENT]) as (extra,):
            answer = await extra.answer(within=5)
        assert answer.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in answer
        for text in texts:
            core.hold[text].set()
        async with asyncio.timeout(5):
            assert await asyncio.gather(*posting) == [200] * cap
    assert sorted(core.stored) == texts
    assert len(serving_lines(caplog)) == 1
