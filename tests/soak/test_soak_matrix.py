"""The soak on Matrix: random kill -9 of a `bridge run` with [matrix] on a real Synapse. As on Telegram,
nothing lost and every message answered or its chat told; unlike Telegram, nothing doubled at all, since
a message resent after a kill carries its transaction id and Synapse drops the repeat. Not in the
default run: `pytest -m soak tests/soak -k matrix` (size and seed as for the Telegram soak)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from pathlib import Path

import pytest

from devkit.fakes.openai_server import FakeOpenAI
from tests.adapters.matrix.synapse import Account, Synapse
from tests.invariants import assert_intact, rows
from tests.soak.checker import check
from tests.soak.harness import Soak, SoakSize
from tests.soak.matrix_side import MatrixSide, SlowHomeserver
from tests.soak.model import SoakModel
from tests.soak.test_soak import budget_s

pytestmark = pytest.mark.soak


async def test_random_kills_on_matrix_lose_nothing_double_nothing_and_answer_or_tell_every_message(
    tmp_path: Path,
    matrix_soak_size: SoakSize,
    synapse: Synapse,
    bot: Account,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    size = matrix_soak_size
    # Each kill cuts a request to the proxy or the fake model short, and aiohttp logs it: expected.
    caplog.set_level(logging.CRITICAL, logger="aiohttp.server")
    replay = f"BRIDGE_SOAK_SEED={size.seed} BRIDGE_SOAK_TURNS={size.turns} BRIDGE_SOAK_KILLS={size.kills}"
    with capsys.disabled():
        print(f"\nmatrix soak: {replay} (set these to replay it); files in {tmp_path}")
    rng = random.Random(size.seed)
    model = SoakModel(random.Random(rng.getrandbits(64)))
    started = time.monotonic()
    async with (
        SlowHomeserver(synapse.base_url, random.Random(rng.getrandbits(64))) as hs,
        FakeOpenAI(model) as llm,
    ):
        side = MatrixSide(synapse, hs, bot)
        side.prepare()
        soak = Soak(tmp_path, side, model, llm.base_url, size, rng)
        deadline = asyncio.timeout(budget_s(size))
        try:
            async with deadline:
                await soak.run()
        except TimeoutError:
            if not deadline.expired():
                raise
            raise AssertionError(
                f"the soak did not finish within {budget_s(size):g} s ({replay})\n{soak.log_tail()}"
            ) from None
        finally:
            await soak.stop()
        found = check(soak)
    kills = soak.kills
    summary = (
        f"matrix soak: turns={soak.turn} messages={len(soak.order)} kills={len(kills)} "
        f"(start-up {sum(k.startup for k in kills)}, mid-model {sum(k.model_open for k in kills)}, "
        f"mid-send {sum(k.mid_send for k in kills)}; a kill may be several) lost={found.lost} "
        f"doubled={found.doubled} unannounced={found.unannounced} "
        f"(answered {found.answered}, told interrupted {found.interrupted}, "
        f"told shut down {found.shut_down}, drafts cut by a kill {found.cut_drafts}) "
        f"model requests={model.requests} slowest SIGTERM exit={max(soak.stop_times, default=0):.1f} s "
        f"seconds={time.monotonic() - started:.0f} seed={size.seed}"
    )
    with capsys.disabled():
        print(summary)
    report = "\n".join(found.problems[:50])
    assert not found.problems, f"{len(found.problems)} problem(s), {replay}:\n{report}"
    assert found.doubled == 0, f"a message arrived twice on Matrix ({replay})"
    # /sync hands over each room's new messages room by room, so across rooms the store's order is not
    # the order they were sent in; within each room it is (check_intake checks that), and none is
    # missing or kept twice.
    stored = [
        text for (text,) in rows(soak.db, "SELECT content FROM messages WHERE kind = 'user' ORDER BY id")
    ]
    assert sorted(stored) == sorted(soak.order), f"user messages lost or doubled ({replay})"
    assert_intact(soak.db, stored)
