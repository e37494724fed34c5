"""Two `bridge run` workers on one PostgreSQL with one chat flooded: never two of its runs at once."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import aiohttp

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from devkit.fakes.telegram_api import FakeTelegram
from tests.adapters.test_failover import FIRST_USER, answered, config_for, rows, settled, workers
from tests.adapters.test_run import SECRET_HEADER, free_port
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


class Hangs:
    """Answers at once, except "hang", which is held until the request is given up; counts the held."""

    def __init__(self) -> None:
        self.held = 0

    async def __call__(self, request: dict[str, Any]) -> Reply:
        asked = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
        if asked == "hang":
            self.held += 1
            await asyncio.Event().wait()
        return fake.text(f"answer to: {asked}")


async def test_stop_sent_to_the_polling_worker_stops_the_run_in_the_worker_that_has_the_chat(
    tmp_path: Path, tg: FakeTelegram, postgres: PostgresServer
) -> None:
    url = postgres.database()
    model = Hangs()
    async with FakeOpenAI(model) as llm:
        # One run per worker: the second chat's run has to go to the worker without the first.
        config = config_for(tmp_path, tg, llm, url, extra="[runs]\nmax_concurrent_runs = 1\n")
        async with workers(tmp_path, config, 2) as (poller, other):
            tg.dm(FIRST_USER, "hang")
            await tg.wait_for(lambda: model.held == 1, timeout=30)
            tg.dm(FIRST_USER + 1, "hang")
            await tg.wait_for(lambda: model.held == 2, timeout=30)
            ((key,),) = rows(
                url,
                "SELECT s.key FROM runs r JOIN sessions s ON s.id = r.session_id JOIN workers w "
                f"ON w.id = r.worker_id WHERE r.status = 'running' AND w.pid = {other.process.pid}",
            )
            user = int(key.rsplit(":", 1)[1])
            tg.dm(user, "/stop")
            await tg.wait_for(
                lambda: any(m["text"] == "Stopped the answer in progress." for m in tg.messages_in(user)),
                timeout=30,
            )
            await other.wait_until_said("as asked in another worker")
            # The chat is free again, and answered by whichever worker claims it.
            tg.dm(user, "after")
            await tg.wait_for(
                lambda: any(m["text"] == "answer to: after" for m in tg.messages_in(user)), timeout=30
            )
            assert poller.process.returncode is None
    statuses = rows(
        url,
        "SELECT r.status FROM runs r JOIN sessions s ON s.id = r.session_id "
        f"WHERE s.key = '{key}' ORDER BY r.started_at",
    )
    assert [status for (status,) in statuses] == ["cancelled", "ok"]


async def test_in_webhook_mode_every_worker_takes_requests_on_one_port_and_a_retry_is_stored_once(
    tmp_path: Path, tg: FakeTelegram, postgres: PostgresServer
) -> None:
    url = postgres.database()
    port = free_port()
    hook = f"http://127.0.0.1:{port}/telegram-hook"
    async with FakeOpenAI(Overlaps()) as llm:
        webhook = f'mode = "webhook"\nwebhook_url = "{hook}"\nport = {port}\nwebhook_secret = "s3cret"\n'
        config = config_for(tmp_path, tg, llm, url, extra=webhook)
        async with workers(tmp_path, config, 2) as (first, second):
            users = range(FIRST_USER, FIRST_USER + 20)
            for user in users:
                update = {"update_id": user, "message": tg.dm(user, f"hello {user}")}
                # Each request on a connection of its own, and each sent twice (Telegram retries).
                for _ in range(2):
                    async with (
                        aiohttp.ClientSession() as http,
                        http.post(hook, json=update, headers={SECRET_HEADER: "s3cret"}) as answer,
                    ):
                        assert answer.status == 200
            await tg.wait_for(lambda: all(answered(tg, u, f"hello {u}") for u in users), timeout=30)
            await settled(url)
            assert first.process.returncode is None and second.process.returncode is None
    for user in users:
        replies = [m["text"] for m in tg.messages_in(user) if m["text"].startswith("answer to: ")]
        assert replies == [f"answer to: hello {user}"], replies
    (stored,) = rows(url, "SELECT COUNT(*) FROM messages WHERE kind = 'user'")
    assert stored[0] == len(users)
