"""Two `bridge run` workers on one PostgreSQL with one chat flooded: never two of its runs at once."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

from tests.adapters.test_failover import FIRST_USER, config_for, rows, settled, workers
from tests.fakes import openai_server as fake
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_api import FakeTelegram
from tests.pg import PostgresServer

BURSTS = 6
PER_BURST = 5


class Overlaps:
    """A slow model that notes how many requests of the chat it has at once (both workers call it)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    async def __call__(self, request: dict[str, Any]) -> Reply:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0.05)
        finally:
            self.now -= 1
        asked = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
        return fake.text(f"answer to: {asked}")


async def test_one_chat_flooded_across_two_workers_never_runs_twice_at_once_and_keeps_its_order(
    tmp_path: Path, tg: FakeTelegram, postgres: PostgresServer
) -> None:
    url = postgres.database()
    model = Overlaps()
    # followup: every message has a run of its own, so the chat's lease changes hands often.
    async with FakeOpenAI(model) as llm:
        config = config_for(tmp_path, tg, llm, url, extra='[runs]\nqueue_mode = "followup"\n')
        async with workers(tmp_path, config, 2):
            sent: list[str] = []
            for burst in range(BURSTS):
                for n in range(PER_BURST):
                    text = f"m{burst}.{n}"
                    tg.dm(FIRST_USER, text)
                    sent.append(text)
                # Between bursts the chat goes idle, and its lease back to the queue.
                await tg.wait_for(
                    lambda: (
                        sum(m["text"].startswith("answer to: ") for m in tg.messages_in(FIRST_USER))
                        == len(sent)
                    ),
                    timeout=60,
                )
            await settled(url)
    assert model.most == 1, model.most
    replies = [m["text"] for m in tg.messages_in(FIRST_USER) if m["text"].startswith("answer to: ")]
    assert replies == [f"answer to: {text}" for text in sent]
    spans = rows(
        url, "SELECT started_at, ended_at, worker_id FROM runs WHERE kind = 'turn' ORDER BY started_at"
    )
    assert len(spans) == len(sent)
    for (_, ended, _), (started, _, _) in itertools.pairwise(spans):
        assert ended <= started, "two runs of one chat overlapped"
    print(f"runs by worker: {sorted(sum(1 for s in spans if s[2] == w) for w in {s[2] for s in spans})}")
