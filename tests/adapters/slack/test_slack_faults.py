"""Slack's faults: rate limits, server errors, lost answers, refusals, poison and redelivered events,
and a kill mid-send, with what the user sees and what each outbox row says."""

from __future__ import annotations

import copy
import logging
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bridge.errors import IntakeUnavailable
from bridge.events import Outbound, Route
from bridge.store.base import OutboxItem
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.adapters.slack.conftest import CHANNEL, MEMBER, OWNER, RigFactory
from tests.fakes.slack_api import FakeSlack
from tests.waiting import eventually


def errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return list(connection.execute(sql))


async def test_a_429_waits_the_retry_after_slack_named_and_posts_once(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapters.slack")
    fake_llm.push(fake.text("after the limit"))
    async with slack_rig(fake_llm, stream=False) as r:
        slack.fail_next("chat.postMessage", "429", retry_after=7)
        asked = slack.dm(OWNER, "hi")
        [reply] = await r.sent(asked["channel"], 1)
    assert reply["text"] == "after the limit"
    assert [c["status"] for c in slack.calls("chat.postMessage")] == ["429", "ok"]
    assert r.waits == [7.0]
    assert any("Slack: chat.postMessage failed (ratelimited)" in m for m in caplog.messages)
    assert not errors(caplog)


async def test_a_server_error_is_retried_into_exactly_one_message_and_a_dropped_update_is_repeated(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("survived"))
    async with slack_rig(fake_llm, stream=False) as r:
        slack.fail_next("chat.postMessage", "500")
        slack.fail_next("chat.update", "drop")
        asked = slack.dm(OWNER, "hi")
        activity, reply = await r.sent(asked["channel"], 2)
    assert reply["text"] == "survived" and activity["text"] == "⚙ get_current_time() ✓"
    assert [c["status"] for c in slack.calls("chat.update")] == ["drop", "ok"]
    assert len(slack.messages_in(asked["channel"])) == 2
    assert not errors(caplog)


async def test_a_post_whose_answer_never_came_is_uncertain_and_not_sent_again(
    slack_rig: RigFactory,
    slack: FakeSlack,
    fake_llm: FakeOpenAI,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Slack carried the post out and its answer never came (a read timeout): chat.postMessage has no
    # idempotency key, so the row is neither resent nor called failed.
    fake_llm.push(fake.text("did you get this?"))
    async with slack_rig(fake_llm, stream=False, read_timeout_s=0.3):
        slack.fail_next("chat.postMessage", "hang")
        asked = slack.dm(OWNER, "hello")
        db = tmp_path / "bridge.db"
        await eventually(
            lambda: rows(db, "SELECT state FROM outbox") == [("uncertain",)], "the row uncertain"
        )
    [(reason,)] = rows(db, "SELECT reason FROM outbox")
    assert "may have arrived" in reason and "chat.postMessage" in reason
    assert len(slack.calls("chat.postMessage")) == 1
    assert [m["text"] for m in slack.messages_in(asked["channel"])] == ["did you get this?"]
    uncertain = [r for r in caplog.records if "marked uncertain" in r.getMessage()]
    assert [r.levelno for r in uncertain] == [logging.WARNING]
    assert not errors(caplog)


@pytest.mark.parametrize("error", ["not_in_channel", "channel_not_found", "is_archived", "account_inactive"])
async def test_a_refusal_is_one_warning_and_the_row_failed(
    slack_rig: RigFactory,
    slack: FakeSlack,
    fake_llm: FakeOpenAI,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    error: str,
) -> None:
    fake_llm.push(fake.text("you won't see this"))
    async with slack_rig(fake_llm, stream=False) as r:
        slack.fail_next("chat.postMessage", "error", error=error)
        slack.post(CHANNEL, MEMBER, f"{r.mention()} hi")
        db = tmp_path / "bridge.db"
        await eventually(lambda: rows(db, "SELECT state FROM outbox") == [("failed",)], "the row failed")
    assert rows(db, "SELECT reason FROM outbox") == [(f"chat.postMessage: {error}",)]
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert [r.levelno for r in refused] == [logging.WARNING]
    assert len(slack.calls("chat.postMessage")) == 1  # final: not tried again
    assert not errors(caplog)


async def test_a_poison_event_is_logged_once_acknowledged_and_skipped(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.push(fake.text("still answering"))
    async with slack_rig(fake_llm, stream=False) as r:
        poison = slack.push_event({"type": "message", "channel": CHANNEL, "user": 5, "ts": "1.000001"})
        malformed = {"envelope_id": "e-malformed", "type": "events_api", "retry_attempt": 0, "payload": "?"}
        slack.push_raw(malformed)
        asked = slack.dm(OWNER, "are you there?")
        [reply] = await r.sent(asked["channel"], 1)
        await slack.wait_for(lambda: {poison["envelope_id"], "e-malformed"} <= set(slack.acks))
    assert reply["text"] == "still answering"
    skipped = [r.getMessage() for r in caplog.records if "skipped event" in r.getMessage()]
    assert len(skipped) == 2
    assert poison["envelope_id"] in skipped[0] and "'user' is int" in skipped[0]
    assert "e-malformed" in skipped[1] and "the event is NoneType" in skipped[1]
    # Acknowledged, so Slack never sends them again.
    assert [e["retry_attempt"] for e in slack.envelopes if e["envelope_id"] == poison["envelope_id"]] == [0]


async def test_an_event_delivered_again_is_answered_once(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("once"), fake.text("twice?"))
    async with slack_rig(fake_llm, stream=False) as r:
        envelope = slack.push_event(slack.dm_event(OWNER, "question"))
        channel = slack.dm_channel(OWNER)
        await r.sent(channel, 1)
        again = copy.deepcopy(envelope)
        again["retry_attempt"], again["retry_reason"] = 1, "timeout"
        slack.push_raw(again)
        await slack.wait_for(lambda: slack.acks.count(envelope["envelope_id"]) == 2)
        await r.settled()
    assert [m["text"] for m in slack.messages_in(channel)] == ["once"]
    assert len(fake_llm.requests) == 1


async def test_an_event_the_store_cannot_take_is_left_unacknowledged_and_slack_sends_it_again(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.push(fake.text("stored in the end"))
    async with slack_rig(fake_llm, stream=False) as r:
        handle = r.bridge.handle
        refusals = [IntakeUnavailable("database is locked")] * 8  # every try of the first delivery

        async def locked_at_first(inbound: Any) -> Any:
            if refusals:
                raise refusals.pop()
            return await handle(inbound)

        r.adapter._handler = locked_at_first
        asked = slack.dm(OWNER, "hello?")
        await eventually(lambda: any("left unacknowledged" in m for m in caplog.messages), "the give-up line")
        assert slack.acks == []
        # Slack sends it again on the next connection (here: it asked the client to reconnect).
        slack.disconnect()
        [reply] = await r.sent(asked["channel"], 1, within=10)
    assert reply["text"] == "stored in the end"
    assert slack.connections == 2
    assert [e["retry_attempt"] for e in slack.envelopes] == [0, 1]
    assert len(fake_llm.requests) == 1


async def test_a_lost_socket_is_reconnected_through_an_outage_and_the_next_message_answered(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.push(fake.text("before"), fake.text("after"))
    async with slack_rig(fake_llm, stream=False, ping_interval_s=0.1) as r:
        channel = slack.dm(OWNER, "first")["channel"]
        await r.sent(channel, 1)
        # Slack is away for a while: the connection drops and a new address is refused 12 times.
        slack.fail_next("apps.connections.open", "500", times=12)
        slack.drop_socket()
        await slack.wait_for(lambda: slack.connections == 2, 15)
        slack.dm(OWNER, "second")
        await r.sent(channel, 2)
    assert [m["text"] for m in slack.messages_in(channel)] == ["before", "after"]
    assert len(slack.calls("apps.connections.open")) == 14
    # The SDK's lines about it are a few WARNINGs (the first of the outage, then every tenth).
    trouble = [r for r in caplog.records if "keeps reconnecting" in r.getMessage()]
    assert 2 <= len(trouble) <= 6 and {r.levelno for r in trouble} == {logging.WARNING}
    assert not errors(caplog)


@pytest.mark.parametrize("resend", [True, False], ids=["resend_uncertain", "at-most-once"])
async def test_a_post_in_flight_at_a_crash_is_sent_again_or_left_uncertain_as_configured(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI, resend: bool
) -> None:
    route = Route("slack", CHANNEL)
    async with slack_rig(fake_llm) as r:
        # Slack took part 0 just before the crash, so its row still says `sending`; part 1 never went.
        await r.adapter.send(Outbound(route, "reply", "part 0"))
        common = OutboxItem("reply", "slack", CHANNEL, "", "pending", parts=2)
        await r.bridge.store.add_outbox(
            replace(common, text="part 0", state="sending", part=0),
            replace(common, text="part 1", part=1),
        )
    async with slack_rig(fake_llm) as r:
        r.bridge.delivery.resend_uncertain = resend
        await r.bridge.recover()
        await r.settled()
        states = [(row.item.part, row.item.state) for row in await r.bridge.store.outbox()]
    texts = [m["text"] for m in slack.messages_in(CHANNEL)]
    if resend:
        # No idempotency key: what may have arrived is sent again, and may show twice.
        assert texts == ["part 0", "part 0", "part 1"] and states == [(0, "sent"), (1, "sent")]
    else:
        assert texts == ["part 0", "part 1"] and states == [(0, "uncertain"), (1, "sent")]
