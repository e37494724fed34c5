"""The typing indicator on Telegram: none for a quick answer, one for a slow answer, a second in."""

from __future__ import annotations

import asyncio

from bridge.gateway.delivery import TYPING_AFTER_S
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.conftest import OWNER, RigFactory


async def test_a_quick_answer_shows_no_typing(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("It is noon."))
    async with rig(fake_llm) as r:
        tg.dm(OWNER, "time?")
        _, reply = await r.sent_to(OWNER, 2)
        # Past the moment a typing action would have gone had the run still been going.
        await asyncio.sleep(TYPING_AFTER_S + 0.2)
    assert reply["text"] == "It is noon."
    assert tg.chat_actions == [] and "sendchataction" not in tg.methods()


async def test_a_slow_answer_shows_typing_once_a_second_in(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    # 2.5 s: long enough that typing repeated every second, or at once and again, would show twice.
    fake_llm.push(fake.delay(2.5, fake.text("Thought it over.")))
    async with rig(fake_llm) as r:
        loop = asyncio.get_running_loop()
        asked_at = loop.time()
        tg.dm(OWNER, "think hard")
        await tg.wait_for(lambda: bool(tg.chat_actions), 5)
        typed_after = loop.time() - asked_at
        [reply] = await r.sent_to(OWNER, 1)
    assert reply["text"] == "Thought it over."
    assert typed_after >= TYPING_AFTER_S
    assert tg.chat_actions == [{"chat_id": OWNER, "action": "typing", "message_thread_id": None}]
