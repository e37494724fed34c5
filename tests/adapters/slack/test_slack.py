"""The real slack_sdk against the fake Slack: DMs, channels, threads, output, access and policy."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest

from adapters.slack import SlackAdapter
from bridge.config import SessionSettings
from bridge.errors import AdapterStartError
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.scripted_model import HistoryTrustingModel
from tests.adapters.slack.conftest import (
    CHANNEL,
    MEMBER,
    OTHER_CHANNEL,
    OWNER,
    STRANGER,
    RigFactory,
    slack_settings,
)
from tests.fakes.slack_api import FakeSlack

CORE = ["load_tool_group", "get_current_time", "search_history", "save_memory"]
CODE = re.compile(r"approve the code ([A-Z2-9]{4}-[A-Z2-9]{4}) ")


def errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_a_dm_turn_updates_its_tool_activity_in_place_and_replies_in_a_separate_mrkdwn_message(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("It is **noon** & _sunny_."))
    async with slack_rig(fake_llm, stream=False) as r:
        asked = slack.dm(OWNER, "time?")
        activity, reply = await r.sent(asked["channel"], 2)
        main = await r.bridge.store.active_session("main")
    assert activity["_request"]["text"] == "⚙ get_current_time() …"
    assert activity["text"] == "⚙ get_current_time() ✓"
    assert [u["ts"] for u in slack.updates] == [activity["ts"]]
    assert reply["text"] == "It is *noon* &amp; _sunny_."
    assert "thread_ts" not in reply["_request"]
    assert reply["_request"]["link_names"] is False and reply["_request"]["unfurl_links"] is False
    assert main is not None and main.surface == "slack"
    assert fake_llm.requests[0]["messages"][-1]["content"] == "time?"
    # The envelope was acknowledged once the message was stored.
    assert len(slack.acks) == 1 and not errors(caplog)


async def test_in_a_channel_only_mentions_are_answered_and_clear_starts_a_new_session(
    slack_rig: RigFactory, slack: FakeSlack
) -> None:
    model = HistoryTrustingModel()
    async with FakeOpenAI(model) as llm, slack_rig(llm) as r:
        slack.post(CHANNEL, MEMBER, "just chatting")
        slack.post(OTHER_CHANNEL, MEMBER, f"{r.mention()} not allowed here")
        slack.post(CHANNEL, MEMBER, f"{r.mention()} show my sessions")
        await r.sent(CHANNEL, 2)
        key = f"slack:group:{CHANNEL}"
        first = await r.bridge.store.active_session(key)
        slack.post(CHANNEL, MEMBER, f"{r.mention()} show my sessions again")
        await r.sent(CHANNEL, 4)
        turn2 = next(
            i
            for i, b in enumerate(llm.requests)
            if b["messages"][-1].get("content") == "show my sessions again"
        )
        assert {"sessions_list", "sessions_history"} <= set(llm.tool_names(turn2))
        slack.post(CHANNEL, MEMBER, f"{r.mention()} /clear")
        sent = await r.sent(CHANNEL, 5)
        second = await r.bridge.store.active_session(key)
        slack.post(CHANNEL, MEMBER, f"{r.mention()} hello")
        await r.sent(CHANNEL, 6)
        hello = next(i for i, b in enumerate(llm.requests) if b["messages"][-1].get("content") == "hello")
        assert llm.tool_names(hello) == CORE
    assert "Started a new session" in sent[4]["text"]
    assert first is not None and second is not None and first.id != second.id
    assert slack.messages_in(OTHER_CHANNEL) == []
    # Each mention came twice (message.channels and app_mention) and was answered once.
    asked = [b["messages"][-1].get("content") for b in llm.requests if b["messages"][-1]["role"] == "user"]
    assert asked.count("show my sessions") == 1 and "just chatting" not in asked


async def test_a_thread_reply_stays_in_its_thread_which_is_a_session_of_its_own_that_the_bot_follows(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("in the thread"), fake.text("still here"))
    async with slack_rig(fake_llm) as r:
        parent = slack.post(CHANNEL, MEMBER, "a topic to discuss")
        slack.post(CHANNEL, MEMBER, f"{r.mention()} what do you think?", thread_ts=parent["ts"])
        [reply] = await r.sent(CHANNEL, 1, thread_ts=parent["ts"])
        # The bot is in the thread now: a reply there is addressed to it without a mention.
        slack.post(CHANNEL, MEMBER, "and then?", thread_ts=parent["ts"])
        await r.sent(CHANNEL, 2, thread_ts=parent["ts"])
        session = await r.bridge.store.active_session(f"slack:group:{CHANNEL}:topic:{parent['ts']}")
    assert reply["text"] == "in the thread" and reply["_request"]["thread_ts"] == parent["ts"]
    assert slack.messages_in(CHANNEL) == []  # nothing at the channel's top level
    assert session is not None
    assert [b["messages"][-1]["content"] for b in fake_llm.requests] == ["what do you think?", "and then?"]


async def test_a_denied_channel_is_answered_in_history_but_nothing_reaches_slack(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI
) -> None:
    def deny_channels(settings):
        deny = {"action": "deny", "match": {"surface": "slack", "chat_type": "group"}}
        settings.session = SessionSettings.model_validate(
            {"send_policy": {"default": "allow", "rules": [deny]}}
        )

    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("It is noon."))
    async with slack_rig(fake_llm, configure=deny_channels) as r:
        slack.post(CHANNEL, MEMBER, f"{r.mention()} what time is it?")
        key = f"slack:group:{CHANNEL}"
        await fake_llm.wait_for(lambda: len(fake_llm.requests) == 2)
        await r.settled()
        session = await r.bridge.store.active_session(key)
        assert session is not None
        rows = await r.bridge.store.outbox(session_id=session.id, state="suppressed")
    assert [(row.item.kind, row.item.text) for row in rows] == [
        ("activity", "⚙ get_current_time() …"),
        ("reply", "It is noon."),
    ]
    assert slack.calls("chat.postMessage") == [] and slack.calls("chat.update") == []


async def test_a_long_reply_is_split_under_4000_characters_with_code_blocks_closed_in_each(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI
) -> None:
    code = "\n".join(f"print({i})  # a line of code <tag>" for i in range(300))
    fake_llm.push(fake.text("Here:\n\n```python\n" + code + "\n```\n\nDone."))
    async with slack_rig(fake_llm, stream=False) as r:
        asked = slack.dm(OWNER, "code please")
        await slack.wait_for(lambda: any("Done." in m["text"] for m in slack.messages_in(asked["channel"])))
        await r.settled()
        chunks = slack.messages_in(asked["channel"])
    assert len(chunks) >= 3
    assert all(len(c["text"]) <= 4000 for c in chunks)
    assert all(c["text"].count("```") % 2 == 0 for c in chunks)
    joined = "".join(c["text"] for c in chunks)
    assert all(f"print({i})" in joined for i in range(300))
    assert "&lt;tag&gt;" in joined and "<tag>" not in joined


async def test_an_answer_streams_into_one_message_updated_as_it_grows(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI
) -> None:
    answer = "An answer that arrives a few characters at a time and ends **whole**."
    fake_llm.push(fake.paced(fake.text(answer), 0.04))
    async with slack_rig(fake_llm) as r:
        r.adapter.min_edit_interval_s = 0.3
        started = time.monotonic()
        asked = slack.dm(OWNER, "tell me")
        [message] = await r.sent(asked["channel"], 1)
        took = time.monotonic() - started
    updates = [u["text"] for u in slack.updates if u["ts"] == message["ts"]]
    assert message["_request"]["text"] != message["text"]  # posted as a draft, then updated
    # Coalesced to the interval: no more than one update per 0.3 s, and the final one.
    assert 2 <= len(updates) <= took / 0.3 + 2
    assert message["text"] == "An answer that arrives a few characters at a time and ends *whole*."


async def test_model_text_never_pings_anyone(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.text(
            "Hey <!channel>, <!here|here>, <@U0MEMBER> and <!subteam^S1> — also @channel, [x](<!everyone>)"
        )
    )
    async with slack_rig(fake_llm, stream=False) as r:
        asked = slack.dm(OWNER, "ping them")
        [reply] = await r.sent(asked["channel"], 1)
    text = reply["text"]
    assert "&lt;!channel&gt;" in text and "&lt;@U0MEMBER&gt;" in text
    assert not re.search(r"<[!@#]", text)
    assert reply["_request"]["link_names"] is False


async def test_a_stranger_is_refused_once_or_paired_as_dm_policy_says(
    slack_rig: RigFactory, slack: FakeSlack, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("hi member"), fake.text("welcome, stranger"))
    async with slack_rig(fake_llm, allowed_users=[MEMBER]) as r:
        member = slack.dm(MEMBER, "hello")
        [reply] = await r.sent(member["channel"], 1)
        stranger = slack.dm(STRANGER, "me too?")
        [refusal] = await r.sent(stranger["channel"], 1)
        assert await r.bridge.store.active_session(f"slack:dm:{MEMBER}") is not None
    assert reply["text"] == "hi member"
    assert STRANGER in refusal["text"]
    async with slack_rig(fake_llm, dm_policy="pairing") as r:
        asked = slack.dm(STRANGER, "hello")
        [_, given] = await r.sent(asked["channel"], 2)
        found = CODE.search(given["text"])
        assert found is not None and len(fake_llm.requests) == 1
        owner = slack.dm(OWNER, f"/pair {found.group(1)}")
        [approved] = await r.sent(owner["channel"], 1)
        told = await r.sent(asked["channel"], 3)
        slack.dm(STRANGER, "hello again")
        answered = await r.sent(asked["channel"], 4)
    assert approved["text"].startswith(f"Approved slack user {STRANGER}:")
    assert told[2]["text"] == "You're approved: you can talk to this bot now."
    assert answered[3]["text"] == "welcome, stranger"


async def test_a_bad_bot_token_or_app_token_is_one_clear_error_naming_its_key(
    tmp_path: Path, slack: FakeSlack, fake_llm: FakeOpenAI
) -> None:
    async def ignore(_: object) -> None:
        return None

    wrong_bot = slack_settings(tmp_path, slack, fake_llm, bot_token="xoxb-wrong")
    with pytest.raises(
        AdapterStartError, match=r"rejected the bot token \(invalid_auth\)\. Check \[slack\] bot_token"
    ):
        await SlackAdapter(wrong_bot.slack).start(ignore)  # type: ignore[arg-type]
    wrong_app = slack_settings(tmp_path, slack, fake_llm, app_token="xapp-wrong")
    adapter = SlackAdapter(wrong_app.slack)
    with pytest.raises(
        AdapterStartError, match=r"rejected the app-level token \(invalid_auth\)\. Check \[slack\] app_token"
    ):
        await adapter.start(ignore)  # type: ignore[arg-type]
    assert slack.connections == 0
    await adapter.stop()  # a second stop does nothing
