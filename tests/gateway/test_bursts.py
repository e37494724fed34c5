"""Bursts: messages sent at once are answered once each (followup) or once together (collect), never twice."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bridge.events import Inbound
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from tests.harness import Harness, running_bridge
from tests.invariants import assert_intact, rows


def answer_last(request: dict[str, Any]) -> Reply:
    """Answers the last user message it was shown, so each reply says which message it covered."""
    last = request["messages"][-1]
    return fake.text(f"answer to {last['content']}")


def answer_last_slowly(request: dict[str, Any]) -> Reply:
    """As a real model: a burst has arrived long before the first answer is written."""
    return fake.delay(0.3, answer_last(request))


def say_at_once(h: Harness, chat: str, texts: list[str]) -> list[Inbound]:
    return [
        Inbound("test", "group", chat, "alice", text, message_id=f"{chat}-{text}", mentioned=True)
        for text in texts
    ]


async def burst(h: Harness, chats: dict[str, list[str]]) -> None:
    """Hand every message to the core back to back, as one getUpdates batch would, then wait for all runs."""
    done = [
        await h.bridge.handle(inbound)
        for chat, texts in chats.items()
        for inbound in say_at_once(h, chat, texts)
    ]
    await asyncio.wait_for(asyncio.gather(*(d for d in done if d is not None)), 30)
    await asyncio.wait_for(h.bridge.lanes.idle(), 30)


def assert_no_request_ends_with_the_bots_own_answer(llm: FakeOpenAI) -> None:
    endings = [body["messages"][-1]["role"] for body in llm.requests]
    assert "assistant" not in endings, endings


def replies_in(h: Harness, chat: str) -> list[str]:
    return [item.text for item in h.sender.sent if item.kind == "reply" and item.route.chat_id == chat]


@pytest.mark.parametrize("n", [2, 5, 50])
async def test_a_burst_in_followup_mode_answers_each_message_once_in_order(tmp_path: Path, n: int) -> None:
    texts = [f"m{i}" for i in range(n)]
    async with (
        FakeOpenAI(answer_last) as llm,
        running_bridge(
            tmp_path,
            llm,
            runs={"queue_mode": "followup", "max_queued": 100},
            session={"send_policy": {}},
            # 50 turns pass the history budget; compaction's own requests are tested on their own.
            agent={"compaction": False},
        ) as h,
    ):
        await burst(h, {"room": texts})
    assert replies_in(h, "room") == [f"answer to {t}" for t in texts]
    assert len(llm.requests) == n
    assert_no_request_ends_with_the_bots_own_answer(llm)
    assert_intact(tmp_path / "bridge.db", texts)


@pytest.mark.parametrize("n", [2, 5, 50])
async def test_a_burst_in_collect_mode_is_answered_once_together(tmp_path: Path, n: int) -> None:
    texts = [f"m{i}" for i in range(n)]
    async with (
        FakeOpenAI(answer_last_slowly) as llm,
        running_bridge(tmp_path, llm, runs={"max_queued": 100}) as h,
    ):
        await burst(h, {"room": texts})
    replies = replies_in(h, "room")
    # The first run answers what had arrived when it started; one follow-up takes all the rest.
    # Nothing is answered twice: the last reply covers the last message, and no two replies are alike.
    assert 1 <= len(replies) <= 2 and len(set(replies)) == len(replies)
    assert replies[-1] == f"answer to m{n - 1}"
    assert len(llm.requests) == len(replies)
    assert_no_request_ends_with_the_bots_own_answer(llm)
    db = tmp_path / "bridge.db"
    assert_intact(db, texts)
    # Every message was taken up by exactly one run.
    uptos = [upto for (upto,) in rows(db, "SELECT input_upto FROM runs ORDER BY started_at")]
    users = [i for (i,) in rows(db, "SELECT id FROM messages WHERE kind = 'user' ORDER BY id")]
    assert uptos == sorted(set(uptos)) and uptos[-1] == users[-1]


async def test_two_messages_a_few_ms_apart_in_two_hundred_chats_never_get_the_same_answer_twice(
    tmp_path: Path,
) -> None:
    chats = {f"chat{c}": [f"c{c}-first", f"c{c}-second"] for c in range(200)}
    async with (
        FakeOpenAI(answer_last) as llm,
        running_bridge(tmp_path, llm, runs={"max_concurrent_runs": 50}) as h,
    ):
        await burst(h, chats)
    twice = {
        chat: replies_in(h, chat)
        for chat in chats
        if len(set(replies_in(h, chat))) != len(replies_in(h, chat))
    }
    assert twice == {}
    assert all(replies_in(h, chat)[-1] == f"answer to {texts[-1]}" for chat, texts in chats.items())
    assert_no_request_ends_with_the_bots_own_answer(llm)


async def test_a_follow_up_run_with_nothing_new_to_answer_asks_the_model_nothing(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("the one answer"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("question")
        session = await h.bridge.store.active_session("main")
        assert session is not None
        result = await h.bridge.runner.run(session, channel="test")
    assert result.status == "skipped"
    assert len(fake_llm.requests) == 1
    assert rows(tmp_path / "bridge.db", "SELECT COUNT(*) FROM runs") == [(1,)]
