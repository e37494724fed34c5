"""The platform conformance suite: one set of cases, run by every adapter (suite.RIGS) on its fake.

Each case runs on the platforms whose rig declares what it needs (`@on(...)`); for the others the run's
summary says "not applicable" and why (conftest.py), and test_capabilities.py holds the declarations
to the adapters' own class attributes. docs/adapters.md says how to run a new adapter through it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from bridge.config import Settings
from bridge.config.session import SendPolicySettings
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply, images_in
from devkit.processes import kill9
from tests.invariants import assert_intact, rows
from tests.platforms.rig import PlatformRig
from tests.platforms.suite import on
from tests.waiting import eventually

JPEG = b"\xff\xd8\xff\xe0" + b"\x01" * 200


async def answer_by_question(request: dict[str, Any]) -> Reply:
    """The model: answers each message by name, so an answer shows which message reached it."""
    asked = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
    return fake.text(f"answer to: {asked}")


def asked(llm: FakeOpenAI) -> list[str]:
    """The user message each model request ended with."""
    return [body["messages"][-1]["content"] for body in llm.requests]


@on()
async def test_a_dm_turn_shows_its_tool_activity_and_then_a_separate_reply(platform: PlatformRig) -> None:
    async with FakeOpenAI() as llm:
        llm.push(fake.tool_call("get_current_time", {}), fake.text("It is noon."))
        async with platform.running(llm, stream=False):
            await platform.dm("what time is it?")
            await platform.said(platform.dm_said, 2, "the DM")
            # The activity message finishes on its own, after the reply went out where it is edited.
            await eventually(lambda: "✓" in platform.dm_said()[0].text, "the tool's activity finished")
            activity, reply = platform.dm_said()
    assert "get_current_time" in activity.text and reply.text == "It is noon."
    assert activity.id != reply.id and activity.file is None
    if platform.capabilities.has("edits"):
        assert activity.states >= 2  # one message, edited from "…" to "✓"
    assert asked(llm)[0] == "what time is it?"


@on("groups")
async def test_in_a_group_only_what_addresses_the_bot_is_answered_and_clear_starts_over(
    platform: PlatformRig,
) -> None:
    async with FakeOpenAI(answer_by_question) as llm, platform.running(llm, stream=False):
        await platform.group("just chatting", mention=False)
        await platform.group("what is up?", mention=True)
        [answer] = await platform.said(platform.group_said, 1, "the group")
        first = await platform.bridge.store.active_session(platform.group_key)
        await platform.group("/clear", mention=True)
        cleared = await platform.said(platform.group_said, 2, "the group")
        second = await platform.bridge.store.active_session(platform.group_key)
        await platform.group("hello again", mention=True)
        said = await platform.said(platform.group_said, 3, "the group")
    # Chatter that doesn't address the bot never reaches the model, nor does the bot's own mention.
    assert answer.text == "answer to: what is up?"
    assert asked(llm) == ["what is up?", "hello again"]
    assert "Started a new session" in cleared[1].text
    assert first is not None and second is not None and first.id != second.id
    # After /clear the model sees the new session only.
    assert [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"] == ["hello again"]
    assert said[2].text == "answer to: hello again"


@on("threads")
async def test_a_thread_is_a_session_of_its_own_and_its_reply_stays_in_it(platform: PlatformRig) -> None:
    async with FakeOpenAI() as llm:
        llm.push(fake.text("in the thread"))
        async with platform.running(llm, stream=False):
            await platform.in_thread("what about this?")
            [reply] = await platform.said(platform.thread_said, 1, "the thread")
            thread = await platform.bridge.store.active_session(platform.thread_key)
            group = await platform.bridge.store.active_session(platform.group_key)
    assert reply.text == "in the thread"
    assert thread is not None and (group is None or group.id != thread.id)
    assert platform.group_said() == []  # nothing at the group's top level
    assert asked(llm) == ["what about this?"]


def shadowed(settings: Settings) -> None:
    settings.session.send_policy = SendPolicySettings(default="deny")


@on()
async def test_in_shadow_mode_the_bot_answers_in_history_sends_nothing_and_suppresses_each_row(
    platform: PlatformRig,
) -> None:
    async with FakeOpenAI() as llm:
        llm.push(fake.tool_call("get_current_time", {}), fake.text("It is noon."))
        async with platform.running(llm, configure=shadowed):
            await platform.dm("what time is it?")
            await llm.wait_for_requests(2, 20)
            await platform.settled()
            session = await platform.bridge.store.active_session(platform.dm_key)
            assert session is not None
            history = await platform.bridge.store.history(session.id, 10)
            outbox = await platform.bridge.store.outbox(session_id=session.id)
    # Nothing reached the platform: no message, no draft, no edit, no typing.
    assert platform.output_calls() == 0 and platform.dm_said() == []
    assert [(row.item.kind, row.item.state) for row in outbox] == [
        ("activity", "suppressed"),
        ("reply", "suppressed"),
    ]
    assert outbox[-1].item.text == "It is noon." and history[-1].content == "It is noon."


def long_answer(limit: int) -> str:
    """Paragraphs of numbered words, half as long again as the platform's limit."""
    words, paragraphs, size = [], [], 0
    while size < limit * 1.5:
        words.append(f"w{size}")
        size += len(words[-1]) + 1
        if len(words) == 40:
            paragraphs.append(" ".join(words))
            words = []
    return "\n\n".join([*paragraphs, " ".join(words)])


@on()
async def test_a_reply_longer_than_the_platform_takes_is_split_under_its_limit_losing_nothing(
    platform: PlatformRig,
) -> None:
    async with FakeOpenAI() as llm, platform.running(llm, stream=False):
        limit = platform.adapter.text_limit
        assert limit is not None, f"{platform.name} declares no text_limit"
        answer = long_answer(limit)
        llm.push(fake.text(answer))
        await platform.dm("tell me everything")
        said = await platform.said(platform.dm_said, 2, "the DM")
    assert len(said) >= 2
    assert all(len(message.text) <= limit for message in said)
    assert " ".join(message.text for message in said).split() == answer.split()


@on("streaming")
async def test_a_streamed_answer_shows_as_it_is_written_and_ends_as_one_whole_reply(
    platform: PlatformRig,
) -> None:
    answer = "An answer that arrives a few characters at a time and ends whole."
    async with FakeOpenAI() as llm:
        llm.push(fake.paced(fake.text(answer), 0.04))
        async with platform.running(llm, stream=True):
            await platform.dm("tell me")
            [reply] = await platform.said(platform.dm_said, 1, "the DM")
    assert reply.text == answer
    assert reply.states >= 3  # partial versions first: a draft edited as it grew, or printed pieces


def vision(settings: Settings) -> None:
    settings.llm.vision = True


@on("files")
async def test_an_image_the_owner_sends_reaches_the_model_with_its_caption(platform: PlatformRig) -> None:
    async with FakeOpenAI() as llm:
        llm.push(fake.text("A small picture."))
        async with platform.running(llm, stream=False, configure=vision):
            await platform.dm_file("what is this?", "picture.jpg", "image/jpeg", JPEG)
            [reply] = await platform.said(platform.dm_said, 1, "the DM")
    assert reply.text == "A small picture."
    assert images_in(llm.requests[0]) == [("image/jpeg", JPEG)]
    [text] = [part["text"] for part in llm.requests[0]["messages"][-1]["content"] if part["type"] == "text"]
    assert text.endswith("what is this?")


@on("files")
async def test_a_file_the_agent_sends_arrives_with_its_caption(platform: PlatformRig) -> None:
    platform.workspace.mkdir(exist_ok=True)
    (platform.workspace / "notes.txt").write_bytes(b"buy milk\n")
    async with FakeOpenAI() as llm:
        llm.push(
            fake.tool_call("load_tool_group", {"group_name": "files"}),
            fake.tool_call("send_file", {"path": "notes.txt", "caption": "Your notes"}),
            fake.text("Sent."),
        )
        async with platform.running(llm, stream=False):
            await platform.dm("send me my notes")
            await eventually(
                lambda: any(s.file for s in platform.dm_said()) and platform.dm_said()[-1].text == "Sent.",
                "the file and the reply",
            )
            await platform.settled()
            said = platform.dm_said()
    [with_file] = [message for message in said if message.file]
    assert with_file.file == ("notes.txt", b"buy milk\n") and "Your notes" in with_file.text
    assert json.loads(llm.requests[2]["messages"][-1]["content"])["status"] == "sent"


@on("rate_limits")
async def test_a_rate_limit_is_waited_out_as_the_platform_asks_and_the_reply_sent_once(
    platform: PlatformRig,
) -> None:
    async with FakeOpenAI() as llm:
        llm.push(fake.text("after the limit"))
        async with platform.running(llm, stream=False):
            wait = platform.rate_limit_next_send()
            await platform.dm("hi")
            said = await platform.said(platform.dm_said, 1, "the DM")
    assert [message.text for message in said] == ["after the limit"]
    assert platform.send_attempts() == 2  # refused once, then sent
    waited = platform.rate_limit_waits()
    assert waited and waited[0] >= wait * 0.9, f"asked to wait {wait} s, waited {waited}"


@on()
async def test_an_event_the_adapter_cannot_read_is_skipped_and_the_chat_carries_on(
    platform: PlatformRig, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeOpenAI(answer_by_question) as llm, platform.running(llm, stream=False):
        await platform.poison()
        await platform.dm("are you there?")
        await eventually(
            lambda: any(s.text == "answer to: are you there?" for s in platform.dm_said()), "the next answer"
        )
        await platform.settled()
        await platform.assert_poison_skipped(caplog.records)
    assert asked(llm)[-1] == "are you there?"
    assert [r for r in caplog.records if r.levelno >= logging.ERROR and "skipped" not in r.getMessage()] == []


@on()
async def test_a_kill_9_mid_send_then_a_restart_loses_nothing_and_shows_twice_only_without_idempotency(
    platform: PlatformRig,
) -> None:
    answer = platform.kill_answer
    async with FakeOpenAI() as llm:
        llm.push(fake.text(answer), fake.text("next answer"))
        async with platform.process(llm) as process:
            platform.hang_next_send()
            await platform.dm("question")
            await platform.send_in_flight()
            await kill9(process)
        assert rows(platform.db, "SELECT kind, state FROM outbox") == [("reply", "sending")]

        async with platform.process(llm) as process:
            await eventually(
                lambda: rows(platform.db, "SELECT state FROM outbox") == [("sent",)], "the resend"
            )
            await platform.dm("and then?")
            await eventually(lambda: platform.dm_said()[-1].text == "next answer", "the next answer", 30)
            await platform.stop(process)
    shown = [message.text for message in platform.dm_said()]
    copies = shown[:-1]
    # The reply in flight shows whole at the end; before it, only what the kill cut short.
    assert copies and copies[-1] == answer and all(answer.startswith(copy) for copy in copies)
    # Where the platform drops a repeated send the resend never shows twice; elsewhere it does, as
    # each platform's docs say (resend_uncertain's default: nothing lost, maybe twice).
    assert len(copies) == (1 if platform.capabilities.has("idempotent_sends") else 2)
    # The finished run was delivered, not run again (a long answer may add a compaction request).
    assert [q for q in asked(llm) if q in ("question", "and then?")] == ["question", "and then?"]
    assert_intact(platform.db, ["question", "and then?"])
