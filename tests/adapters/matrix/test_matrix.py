"""The real matrix-nio against a real Synapse: direct rooms, rooms, threads, output, access and policy."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import pytest

from bridge.config import SessionSettings
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.scripted_model import HistoryTrustingModel
from tests.adapters.matrix.conftest import MatrixRig, Person, RigFactory, shown

CORE = ["load_tool_group", "get_current_time", "search_history", "save_memory"]


def errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def direct_room(r: MatrixRig, person: Person) -> str:
    room = await person.create_room(r.bot.user_id, direct=True)
    await r.joined(person, room)
    return room


async def test_a_dm_turn_edits_its_tool_activity_in_place_and_replies_in_a_separate_html_message(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    ann = await people("ann")
    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("It is **noon** & <b>sunny</b>."))
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"], stream=False) as r:
        room = await direct_room(r, ann)
        await ann.say(room, "time?")
        activity, reply = await r.sent(ann, room, 2)
        main = await r.bridge.store.active_session("main")
    assert activity.first["body"] == "⚙ get_current_time() …" and activity.first["msgtype"] == "m.notice"
    assert activity.body == "⚙ get_current_time() ✓"
    assert [e["m.relates_to"]["rel_type"] for e in activity.edits] == ["m.replace"]
    assert reply.body == "It is **noon** & <b>sunny</b>."
    assert reply.html == "<p>It is <strong>noon</strong> &amp; &lt;b&gt;sunny&lt;/b&gt;.</p>"
    assert reply.content["msgtype"] == "m.text" and reply.content["m.mentions"] == {}
    assert "m.relates_to" not in reply.first
    assert main is not None and main.surface == "matrix"
    assert fake_llm.requests[0]["messages"][-1]["content"] == "time?"
    assert not errors(caplog)


async def test_in_a_room_only_mentions_are_answered_and_clear_starts_a_new_session(
    matrix_rig: RigFactory, people: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ann, bob = await people("ann"), await people("bob")
    room = await group_room_before(ann, bob)
    model = HistoryTrustingModel()
    async with FakeOpenAI(model) as llm, matrix_rig(llm, allowed_rooms=[room]) as r:
        await invite_bot(r, ann, room)
        await bob.say(room, "just chatting about bridges")
        await bob.say(room, "show my sessions", mention=r_person(r))
        await r.sent(bob, room, 2)
        key = f"matrix:group:{room}"
        first = await r.bridge.store.active_session(key)
        await bob.say(room, "Bridge, show my sessions again")  # the name as a word is a mention too
        await r.sent(bob, room, 4)
        turn2 = next(
            i
            for i, b in enumerate(llm.requests)
            if b["messages"][-1].get("content") == "show my sessions again"
        )
        assert {"sessions_list", "sessions_history"} <= set(llm.tool_names(turn2))
        await bob.say(room, "/clear", mention=r_person(r))
        messages = await r.sent(bob, room, 5)
        second = await r.bridge.store.active_session(key)
        await bob.say(room, "hello", mention=r_person(r))
        await r.sent(bob, room, 6)
        hello = next(i for i, b in enumerate(llm.requests) if b["messages"][-1].get("content") == "hello")
        assert llm.tool_names(hello) == CORE
    assert "Started a new session" in messages[4].body
    assert first is not None and second is not None and first.id != second.id
    asked = [b["messages"][-1].get("content") for b in llm.requests if b["messages"][-1]["role"] == "user"]
    assert "just chatting about bridges" not in asked and asked.count("show my sessions") == 1
    assert not errors(caplog)


async def group_room_before(owner: Person, *members: Person) -> str:
    """A room made by `owner` with `members` in it; the bot is invited once its id is allowed."""
    room = await owner.create_room(*(m.user_id for m in members), name="general")
    for member in members:
        await member.join(room)
    return room


def r_person(r: MatrixRig) -> Person:
    """The bot as someone to mention (its user id, and the display name the rig gave it)."""
    return Person(r.bot, None, "Bridge")  # type: ignore[arg-type]


async def invite_bot(r: MatrixRig, owner: Person, room: str) -> None:
    await owner.invite(room, r.bot.user_id)
    await r.joined(owner, room)


async def test_a_thread_reply_stays_in_its_thread_which_is_a_session_the_bot_then_follows(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI
) -> None:
    ann, bob = await people("ann"), await people("bob")
    room = await group_room_before(ann, bob)
    fake_llm.push(fake.text("in the thread"), fake.text("still here"))
    async with matrix_rig(fake_llm, allowed_rooms=[room]) as r:
        await invite_bot(r, ann, room)
        root = await bob.say(room, "a topic to discuss")
        asked = await bob.say(room, "what do you think?", mention=r_person(r), thread=root)
        [reply] = await r.sent(bob, room, 1, thread=root)
        # The bot is in the thread now: a message there is addressed to it without a mention.
        await bob.say(room, "and then?", thread=root)
        await r.sent(bob, room, 2, thread=root)
        session = await r.bridge.store.active_session(f"matrix:group:{room}:topic:{root}")
        top = shown(await bob.events(room), r.bot.user_id)
    assert reply.body == "in the thread"
    assert reply.first["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": root,
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": asked},
    }
    assert top == []  # nothing in the room's main timeline
    assert session is not None
    assert [b["messages"][-1]["content"] for b in fake_llm.requests] == ["what do you think?", "and then?"]


async def test_a_denied_room_is_answered_in_history_but_nothing_reaches_matrix(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI
) -> None:
    def deny_rooms(settings):
        deny = {"action": "deny", "match": {"surface": "matrix", "chat_type": "group"}}
        settings.session = SessionSettings.model_validate(
            {"send_policy": {"default": "allow", "rules": [deny]}}
        )

    ann = await people("ann")
    room = await group_room_before(ann)
    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("It is noon."))
    async with matrix_rig(fake_llm, allowed_rooms=[room], configure=deny_rooms) as r:
        await invite_bot(r, ann, room)
        await ann.say(room, "what time is it?", mention=r_person(r))
        await fake_llm.wait_for(lambda: len(fake_llm.requests) == 2)
        await r.settled()
        session = await r.bridge.store.active_session(f"matrix:group:{room}")
        assert session is not None
        rows = await r.bridge.store.outbox(session_id=session.id, state="suppressed")
        events = await ann.events(room)
    assert [(row.item.kind, row.item.text) for row in rows] == [
        ("activity", "⚙ get_current_time() …"),
        ("reply", "It is noon."),
    ]
    assert shown(events, r.bot.user_id) == []


async def test_a_long_reply_is_split_with_code_blocks_closed_in_each_part(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI
) -> None:
    ann = await people("ann")
    code = "\n".join(f"print({i})  # a line of code <tag> that is long enough to matter" for i in range(400))
    fake_llm.push(fake.text("Here:\n\n```python\n" + code + "\n```\n\nDone."))
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"], stream=False) as r:
        room = await direct_room(r, ann)
        await ann.say(room, "code please")
        deadline = time.monotonic() + 15
        while not any("Done." in m.body for m in shown(await ann.events(room), r.bot.user_id)):
            assert time.monotonic() < deadline
            await r.settled()
        await r.settled()
        chunks = shown(await ann.events(room), r.bot.user_id)
    assert len(chunks) >= 2
    assert all(len(c.body) <= 12_000 for c in chunks)
    assert all(c.body.count("```") % 2 == 0 for c in chunks)
    assert all(c.html is not None and c.html.count("<pre>") == c.html.count("</pre>") for c in chunks)
    joined = "".join(c.body for c in chunks)
    assert all(f"print({i})" in joined for i in range(400))
    assert all("<tag>" not in (c.html or "") and "&lt;tag&gt;" in (c.html or "") for c in chunks[:1])


async def test_an_answer_streams_into_one_message_edited_at_most_once_an_interval(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI
) -> None:
    ann = await people("ann")
    answer = "An answer that arrives a few characters at a time and ends **whole**."
    fake_llm.push(fake.paced(fake.text(answer), 0.04))
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"]) as r:
        room = await direct_room(r, ann)
        r.adapter.min_edit_interval_s = 0.3
        started = time.monotonic()
        await ann.say(room, "tell me")
        [message] = await r.sent(ann, room, 1)
        took = time.monotonic() - started
    assert message.first["body"] != message.body  # sent as a draft, then edited
    # Coalesced to the interval: no more than one edit per 0.3 s, and the final one.
    assert 2 <= len(message.edits) <= took / 0.3 + 2
    assert message.body == answer
    assert (
        message.html
        == "<p>An answer that arrives a few characters at a time and ends <strong>whole</strong>.</p>"
    )


async def test_model_text_never_pings_anyone(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI
) -> None:
    ann, bob = await people("ann"), await people("bob")
    fake_llm.push(
        fake.text(f"Hey @room and {bob.user_id}, see [Bob](https://matrix.to/#/{bob.user_id}) and Bob.")
    )
    room = await group_room_before(ann, bob)
    async with matrix_rig(fake_llm, allowed_rooms=[room], stream=False) as r:
        await invite_bot(r, ann, room)
        await ann.say(room, "ping them", mention=r_person(r))
        [reply] = await r.sent(ann, room, 1)
    assert reply.content["m.mentions"] == {}
    assert reply.html is not None and "matrix.to" not in reply.html and "<a " not in reply.html


async def test_a_stranger_is_refused_once_or_paired_and_a_disallowed_room_is_never_joined(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapters.matrix")
    ann, bob, eve = await people("ann"), await people("bob"), await people("eve")
    fake_llm.push(fake.text("hi bob"), fake.text("welcome, eve"))
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"], allowed_users=[bob.user_id]) as r:
        room = await direct_room(r, bob)
        await bob.say(room, "hello")
        [reply] = await r.sent(bob, room, 1)
        # Eve's room is not allowed, nor is a direct chat from her: neither invite is taken.
        closed = await eve.create_room(r.bot.user_id, name="eve's room")
        eve_dm = await eve.create_room(r.bot.user_id, direct=True)
        await wait_until_declined(r, eve, closed)
        await wait_until_declined(r, eve, eve_dm)
        assert await r.bridge.store.active_session(f"matrix:dm:{bob.user_id}") is not None
    assert reply.body == "hi bob"
    assert any(f"declining an invite to {closed}" in m for m in caplog.messages)
    assert any(f"declining an invite to {eve_dm}" in m and "direct chat" in m for m in caplog.messages)
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"], dm_policy="pairing") as r:
        room = await direct_room(r, eve)
        await eve.say(room, "hello")
        [given] = await r.sent(eve, room, 1)
        found = re.search(r"approve the code ([A-Z2-9]{4}-[A-Z2-9]{4}) ", given.body)
        assert found is not None
        owner_room = await direct_room(r, ann)
        await ann.say(owner_room, f"/pair {found.group(1)}")
        [approved] = await r.sent(ann, owner_room, 1)
        await r.sent(eve, room, 2)
        await eve.say(room, "hello again")
        answered = await r.sent(eve, room, 3)
    assert approved.body.startswith(f"Approved matrix user {eve.user_id} (Eve):")
    assert answered[2].body == "welcome, eve"


async def wait_until_declined(r: MatrixRig, person: Person, room: str, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while await person.membership(room, r.bot.user_id) != "leave":
        assert time.monotonic() < deadline, f"the bot never declined {room}"
        await r.settled()


async def test_an_encrypted_room_is_told_once_that_the_bot_cannot_read_it(
    matrix_rig: RigFactory, people: Any, fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    ann = await people("ann")
    async with matrix_rig(fake_llm, owners=[f"matrix:{ann.user_id}"]) as r:
        room = await ann.create_room(r.bot.user_id, direct=True, encrypted=True)
        await r.joined(ann, room)
        secret = {
            "algorithm": "m.megolm.v1.aes-sha2",
            "ciphertext": "AwgAEnAc0ffee",
            "device_id": "ANNPHONE",
            "sender_key": "c2VuZGVyIGtleQ",
            "session_id": "c2Vzc2lvbg",
        }
        await ann.send_event(room, "m.room.encrypted", secret)
        await ann.send_event(room, "m.room.encrypted", {**secret, "ciphertext": "AwgAEnAc0ffe2"})
        [notice] = await r.sent(ann, room, 1)
        await ann.say(room, "and in clear text?")
        messages = await r.sent(ann, room, 2)
    assert notice.body == "Sorry, I can't open end-to-end encrypted messages. I read text and photos."
    assert len(messages) == 2  # the second encrypted message got no second notice
    assert len(fake_llm.requests) == 1 and not errors(caplog)
