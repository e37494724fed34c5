"""Scheduled tasks and webhooks through the real Telegram adapter and a real `bridge run`: a task made
in a DM posts in a group, a kill -9 right after a firing began never fires it twice, downtime is
caught up or told, `bridge tasks run-now` reaches a running bot, and a signed webhook is answered in a
group, once, even when the process dies right after answering 202."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from adapters.telegram.updates import SECRET_HEADER
from bridge.events import Route
from bridge.store.sqlite import SQLiteStore
from bridge.store.tasks import TaskRow
from bridge.tasks.hooks import TIMESTAMP_HEADER, signature
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import bridge_process, bridge_running, kill9, telegram_run_config
from tests.adapters.conftest import GROUP, OWNER, RigFactory
from tests.pg import free_port
from tests.test_cli import bridge

SECRET = "a-webhook-secret-for-tests-42"
GROUP_KEY = f"telegram:group:{GROUP}"


@dataclass
class Clock:
    now: float

    def __call__(self) -> float:
        return self.now


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql))


def asked(request: dict[str, Any]) -> str:
    return str(next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user"))


def once_at(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")


async def add_tasks(db: Path, *tasks: TaskRow) -> None:
    """Tasks stored before `bridge run` starts, as a bot that was down left them."""
    store = SQLiteStore(db)
    await store.open()
    try:
        for task in tasks:
            assert await store.add_task(task, max_per_chat=20)
    finally:
        await store.close()


def owners_task(task_id: str, prompt: str, due: float, **changes: Any) -> TaskRow:
    """A one-shot task of the owner's, due at `due`, answering in their DM."""
    fields: dict[str, Any] = {
        "id": task_id,
        "chat_key": "main",
        "deliver_to": "main",
        "prompt": prompt,
        "kind": "once",
        "expression": once_at(due),
        "zone": "UTC",
        "state": "active",
        "created_at": due - 3600,
        "next_due": due,
        "route": Route("telegram", str(OWNER)).to_json(),
    }
    return TaskRow(**{**fields, **changes})


class Answering:
    """Answers each request with what its last user message asked; holds the ones `hold` picks until
    the process is killed."""

    def __init__(self, hold: str | None = None) -> None:
        self.hold = hold

    async def __call__(self, request: dict[str, Any]) -> Reply:
        question = asked(request)
        if self.hold is not None and self.hold in question:
            await asyncio.Event().wait()
        return fake.text(f"answer to: {question.splitlines()[-1]}")


# -- in one process, on a clock the test moves --------------------------------------------------


async def test_a_task_made_in_a_telegram_dm_fires_at_its_time_and_posts_in_a_group(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("Hi group"))
    async with rig(fake_llm) as r:
        clock = Clock(float(int(time.time())))  # whole seconds: "in 20 minutes" is counted so
        r.bridge.tasks.clock = clock
        tg.group(GROUP, OWNER, "@bridge_test_bot hello")
        await r.sent_to(GROUP, 1)
        fake_llm.push(
            fake.tool_call("load_tool_group", {"group_name": "scheduled_tasks"}),
            fake.tool_call(
                "schedule_task",
                {"prompt": "Tell the group to stand up", "when": "in 20 minutes", "deliver_to": GROUP_KEY},
            ),
            fake.text("Scheduled for the group."),
        )
        tg.dm(OWNER, "remind the group in 20 minutes to stand up")
        await tg.wait_for(lambda: any("Scheduled" in m["text"] for m in tg.messages_in(OWNER)), 10)
        (task,) = await r.bridge.tasks.tasks_of("main")
        assert task.deliver_to == GROUP_KEY

        # /tasks in the DM lists it, with where it posts.
        tg.dm(OWNER, "/tasks")
        await tg.wait_for(lambda: any(task.id in m["text"] for m in tg.messages_in(OWNER)), 10)
        listing = next(m["text"] for m in tg.messages_in(OWNER) if task.id in m["text"])
        assert f"posts to {GROUP_KEY}" in listing

        clock.now += 1199
        assert await r.bridge.tasks.tick() == 0
        clock.now += 1
        fake_llm.push(fake.text("Time to stand up, everyone!"))
        assert await r.bridge.tasks.tick() == 1
        await r.bridge.tasks.idle()
        group = [m["text"] for m in await r.sent_to(GROUP, 2)]
        assert group == ["Hi group", "Time to stand up, everyone!"]
        assert "Tell the group to stand up" in asked(fake_llm.requests[-1])
        assert await r.bridge.tasks.tasks_of("main") == []


# -- a real `bridge run` ------------------------------------------------------------------------


async def test_a_kill_right_after_a_firing_began_never_fires_it_twice_and_the_owner_is_told(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    db = tmp_path / "bridge.db"
    model = Answering(hold="Write the daily report")
    async with FakeOpenAI(model) as llm:
        config = telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, llm.base_url)
        # Due a second ago: the first pass of the scheduler fires it, with no waiting.
        due = time.time() - 1
        await add_tasks(
            db, owners_task("daily01", "Write the daily report", due, kind="cron", expression="0 9 * * *")
        )
        async with bridge_process(tmp_path, config) as process:
            await llm.wait_for_requests(1, timeout=30)  # the firing's run is asking the model
            await kill9(process)
        assert rows(db, "SELECT state, run_id IS NOT NULL FROM task_firings") == [("running", 1)]
        assert rows(db, "SELECT status FROM runs") == [("running",)]

        model.hold = None
        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: any("cut short" in m["text"] for m in tg.messages_in(OWNER)), 30)
            tg.dm(OWNER, "still there?")
            await tg.wait_for(
                lambda: any("answer to: still there?" in m["text"] for m in tg.messages_in(OWNER)), 30
            )
    # One request ever carried the task's prompt: the one the kill cut short.
    assert sum("Write the daily report" in asked(r) for r in llm.requests) == 1
    assert rows(db, "SELECT state FROM task_firings") == [("interrupted",)]
    texts = [m["text"] for m in tg.messages_in(OWNER)]
    assert not any("daily report" in t and "answer to" in t for t in texts)
    (notice,) = [t for t in texts if "cut short" in t]
    assert "daily01" in notice and "Next run" in notice
    (next_due,) = rows(db, "SELECT next_due FROM tasks")[0]
    assert next_due > time.time()  # moved on to its next time, tomorrow at 09:00


async def test_after_downtime_a_recent_firing_runs_once_and_an_old_one_is_told_as_missed(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    db = tmp_path / "bridge.db"
    async with FakeOpenAI(Answering()) as llm:
        config = telegram_run_config(
            tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, "[tasks]\ncatch_up_s = 600\n"
        )
        now = time.time()
        await add_tasks(
            db,
            owners_task("recent01", "Water the plants", now - 120),
            owners_task("old00001", "Call the bank", now - 1200),
        )
        async with bridge_running(tmp_path, config):
            await tg.wait_for(
                lambda: (
                    any("Water the plants" in m["text"] for m in tg.messages_in(OWNER))
                    and any("did not run" in m["text"] for m in tg.messages_in(OWNER))
                ),
                30,
            )
    texts = [m["text"] for m in tg.messages_in(OWNER)]
    assert sum("answer to: Water the plants" in t for t in texts) == 1
    (missed,) = [t for t in texts if "did not run" in t]
    assert "old00001" in missed and "bot was down" in missed
    assert not any("Call the bank" in asked(r) for r in llm.requests)
    states = dict(rows(db, "SELECT task_id, state FROM task_firings"))
    assert states == {"recent01": "ok", "old00001": "missed"}


async def test_bridge_tasks_run_now_reaches_a_running_bridge_which_fires_the_task_once(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    db = tmp_path / "bridge.db"
    async with FakeOpenAI(Answering()) as llm:
        config = telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, llm.base_url)
        tomorrow = time.time() + 86400
        await add_tasks(db, owners_task("later001", "Summarise the news", tomorrow))
        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: tg.open_polls > 0, timeout=30)
            done = await bridge("tasks", "run-now", "later001", "--config", str(config), cwd=tmp_path)
            assert done.code == 0, done.output
            assert "within a few seconds" in done.stdout
            await tg.wait_for(
                lambda: any("Summarise the news" in m["text"] for m in tg.messages_in(OWNER)), 30
            )
            listed = await bridge("tasks", "list", "--config", str(config), cwd=tmp_path)
    assert sum("Summarise the news" in asked(r) for r in llm.requests) == 1
    # The schedule stays: it still fires tomorrow.
    assert "later001" in listed.stdout and "active" in listed.stdout
    assert rows(db, "SELECT next_due FROM tasks") == [(tomorrow,)]


def webhook_config(tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, port: int, extra: str = "") -> Path:
    """`bridge run` on a Telegram webhook (no admin server): the webhook's server takes /hooks too."""
    telegram = (
        f'mode = "webhook"\nwebhook_url = "http://127.0.0.1:{port}/telegram"\nport = {port}\n'
        f'webhook_secret = "tg-secret"\nallowed_chats = ["{GROUP}"]\n'
    )
    hooks = (
        f'[[hooks]]\nname = "deploys"\nsecret = "{SECRET}"\ndeliver_to = "{GROUP_KEY}"\n'
        'prompt = "Deploy of {{body.app}}: {{body.status}}"\nid_field = "id"\n'
    )
    return telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, telegram + extra + hooks)


async def deliver(port: int, message: dict[str, Any]) -> None:
    """Telegram's POST of a message to the bot's webhook (the fake does not push updates itself)."""
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        update = {"update_id": 900_000 + message["message_id"], "message": message}
        sent = await client.post(
            f"http://127.0.0.1:{port}/telegram", json=update, headers={SECRET_HEADER: "tg-secret"}
        )
        assert sent.status_code == 200, sent.text


async def post_hook(
    port: int, body: dict[str, Any], secret: str = SECRET, at: float | None = None
) -> httpx.Response:
    """A sender's request, signed over '<timestamp>.<body>' with the timestamp `at` (default now)."""
    raw = json.dumps(body).encode()
    stamp = int(time.time() if at is None else at)
    headers = {
        "X-Bridge-Signature": signature(secret, raw, stamp),
        TIMESTAMP_HEADER: str(stamp),
        "Content-Type": "application/json",
    }
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        return await client.post(f"http://127.0.0.1:{port}/hooks/deploys", content=raw, headers=headers)


async def test_a_signed_webhook_is_answered_in_a_telegram_group_once_and_a_bad_one_is_refused(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    port = free_port()
    async with FakeOpenAI(Answering()) as llm:
        config = webhook_config(tmp_path, tg, llm, port)
        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: tg.webhook is not None, timeout=30)
            refused = await post_hook(port, {"id": 1, "app": "shop", "status": "green"}, secret="x" * 20)
            assert refused.status_code == 401
            signed_at = time.time()
            accepted = await post_hook(port, {"id": 1, "app": "shop", "status": "green"}, at=signed_at)
            assert accepted.status_code == 202, accepted.text
            await tg.wait_for(lambda: len(tg.messages_in(GROUP)) == 1, timeout=30)
            # The same request sent again as it was is a replay; signed again, a redelivery.
            replayed = await post_hook(port, {"id": 1, "app": "shop", "status": "green"}, at=signed_at)
            assert replayed.status_code == 401
            again = await post_hook(port, {"id": 1, "app": "shop", "status": "green"}, at=signed_at - 1)
            assert again.status_code == 200 and again.json()["status"] == "duplicate"
            assert (await post_hook(port, {"id": 2, "app": "shop", "status": "red"})).status_code == 202
            await tg.wait_for(lambda: len(tg.messages_in(GROUP)) == 2, timeout=30)
            # Telegram's own webhook still works beside them, on the same server.
            await deliver(port, tg.dm(OWNER, "and you?"))
            await tg.wait_for(lambda: len(tg.messages_in(OWNER)) == 1, timeout=30)
    assert [m["text"] for m in tg.messages_in(GROUP)] == [
        "answer to: Deploy of shop: green",
        "answer to: Deploy of shop: red",
    ]
    assert rows(tmp_path / "bridge.db", "SELECT COUNT(*) FROM hook_events") == [(2,)]


async def test_a_webhook_answered_202_survives_a_kill_9_before_its_run_and_is_answered_once(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    port = free_port()
    db = tmp_path / "bridge.db"
    # One run at a time, taken by the owner's question that hangs: the event waits behind it.
    model = Answering(hold="take your time")
    async with FakeOpenAI(model) as llm:
        config = webhook_config(tmp_path, tg, llm, port, "[runs]\nmax_concurrent_runs = 1\n")
        async with bridge_process(tmp_path, config) as process:
            await tg.wait_for(lambda: tg.webhook is not None, timeout=30)
            await deliver(port, tg.dm(OWNER, "take your time"))
            await llm.wait_for_requests(1, timeout=30)
            accepted = await post_hook(port, {"id": 9, "app": "api", "status": "green"})
            assert accepted.status_code == 202
            await kill9(process)
        assert rows(db, "SELECT COUNT(*) FROM hook_events") == [(1,)]

        model.hold = None
        async with bridge_running(tmp_path, config):
            await tg.wait_for(lambda: len(tg.messages_in(GROUP)) == 1, timeout=30)
            await tg.wait_for(lambda: any("interrupted" in m["text"] for m in tg.messages_in(OWNER)), 30)
    assert [m["text"] for m in tg.messages_in(GROUP)] == ["answer to: Deploy of api: green"]
    assert sum("Deploy of api" in asked(r) for r in llm.requests) == 1
    assert rows(db, "SELECT state FROM hook_events") == [("ok",)]
