"""Random kill -9 of `bridge run` over many turns in several chats: nothing lost, nothing unannounced,
nothing sent twice beyond the uncertain window, nothing left running. Not in the default run:
`pytest -m soak tests/soak` (size and seed from BRIDGE_SOAK_TURNS, BRIDGE_SOAK_KILLS, BRIDGE_SOAK_SEED)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from pathlib import Path

import pytest

from devkit.fakes.openai_server import FakeOpenAI
from tests.invariants import assert_intact
from tests.soak.checker import check
from tests.soak.harness import Soak, SoakSize
from tests.soak.model import SoakModel
from tests.soak.slow_telegram import SlowTelegram, TelegramSide

pytestmark = pytest.mark.soak


def budget_s(size: SoakSize) -> float:
    """A bound on the whole soak, far above its usual time, so a slow leak of time still ends it."""
    return 120 + 4 * size.turns + 20 * size.kills


async def test_random_kills_lose_nothing_and_every_message_is_answered_or_told(
    tmp_path: Path,
    soak_size: SoakSize,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Each kill cuts a request to a fake short, and aiohttp logs an error for it: expected, and noise.
    caplog.set_level(logging.CRITICAL, logger="aiohttp.server")
    replay = (
        f"BRIDGE_SOAK_SEED={soak_size.seed} BRIDGE_SOAK_TURNS={soak_size.turns} "
        f"BRIDGE_SOAK_KILLS={soak_size.kills}"
    )
    with capsys.disabled():
        print(f"\nsoak: {replay} (set these to replay it); files in {tmp_path}")
    rng = random.Random(soak_size.seed)
    # The fakes draw from generators of their own, so the driver's choices replay the same under a seed.
    model = SoakModel(random.Random(rng.getrandbits(64)))
    started = time.monotonic()
    async with SlowTelegram(random.Random(rng.getrandbits(64))) as tg, FakeOpenAI(model) as llm:
        llm.transcribe = model.transcribe
        soak = Soak(tmp_path, TelegramSide(tg), model, llm.base_url, soak_size, rng)
        deadline = asyncio.timeout(budget_s(soak_size))
        try:
            async with deadline:
                await soak.run()
        except TimeoutError:
            if not deadline.expired():
                raise
            raise AssertionError(
                f"the soak did not finish within {budget_s(soak_size):g} s ({replay})\n{soak.log_tail()}"
            ) from None
        finally:
            await soak.stop()
        found = check(soak)
    kills = soak.kills
    summary = (
        f"soak: turns={soak.turn} messages={len(soak.order)} kills={len(kills)} "
        f"(start-up {sum(k.startup for k in kills)}, mid-model {sum(k.model_open for k in kills)}, "
        f"mid-send {sum(k.mid_send for k in kills)}, mid-transcription {sum(k.transcribing for k in kills)}; "
        f"a kill may be several) lost={found.lost} "
        f"doubled={found.doubled} unannounced={found.unannounced} "
        f"(answered {found.answered}, told interrupted {found.interrupted}, "
        f"told shut down {found.shut_down}, drafts cut by a kill {found.cut_drafts}) "
        f"voice={len(soak.voiced)} (unread after a kill {len(found.unread_voice)}) photos={soak.photos} "
        f"model requests={model.requests} slowest SIGTERM exit={max(soak.stop_times, default=0):.1f} s "
        f"seconds={time.monotonic() - started:.0f} seed={soak_size.seed}"
    )
    with capsys.disabled():
        print(summary)
    report = "\n".join(found.problems[:50])
    assert not found.problems, f"{len(found.problems)} problem(s), {replay}:\n{report}"
    # A voice note no run read yet is stored with no text (its chat was told; /retry reads it).
    assert_intact(soak.db, ["" if text in found.unread_voice else text for text in soak.order])
