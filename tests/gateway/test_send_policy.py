"""The send policy at every outbound path: shadow mode, ignore, /send, /status, the outbox."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bridge.events import Inbound
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import Harness, running_bridge

ROOM = "test:group:room"


def rules(*items: dict[str, Any], default: str = "allow") -> dict[str, Any]:
    return {"send_policy": {"default": default, "rules": list(items)}}


def in_room(h: Harness, text: str, sender: str = "alice") -> Inbound:
    return Inbound(
        surface="test",
        chat_type="group",
        chat_id="room",
        sender_id=sender,
        text=text,
        message_id=f"room-{text}-{sender}",
        mentioned=True,
    )


async def room_says(h: Harness, text: str, sender: str = "alice") -> None:
    done = await h.bridge.handle(in_room(h, text, sender))
    if done is not None:
        await asyncio.wait_for(done, 10)


def to_room(h: Harness) -> list[str]:
    return [item.text for item in h.sender.sent if item.route.chat_id == "room"]


async def room_rows(h: Harness) -> list[Any]:
    session = await h.bridge.store.active_session(ROOM)
    assert session is not None
    return await h.bridge.store.history(session.id, 100)


async def test_a_denied_chat_is_read_and_answered_in_history_but_nothing_is_sent(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("get_current_time", {}),
        fake.text("It is noon."),
    )
    deny_room = rules({"action": "deny", "match": {"key_prefix": ROOM}})
    async with running_bridge(tmp_path, fake_llm, session=deny_room) as h:
        await room_says(h, "what time is it?")
        assert to_room(h) == []
        history = await room_rows(h)
        assert [r.kind for r in history] == ["user", "tool_call", "tool_result", "assistant"]
        session = await h.bridge.store.active_session(ROOM)
        assert session is not None
        suppressed = await h.bridge.store.outbox(session_id=session.id, state="suppressed")
        assert [(r.item.kind, r.item.text) for r in suppressed] == [
            ("activity", "⚙ get_current_time() …"),
            ("reply", "It is noon."),
        ]
        assert {r.item.reason for r in suppressed} == {"rule 1 (deny: key_prefix=test:group:room)"}
    assert h.sender.edits == []


async def test_a_denied_chat_shows_no_typing(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    typed: list[str] = []
    # Slow enough that an allowed chat would see typing (after a second).
    fake_llm.push(fake.delay(1.5, fake.text("hi")))
    async with running_bridge(tmp_path, fake_llm, session=rules({"action": "deny", "match": {}})) as h:

        async def typing(route: Any) -> None:
            typed.append(route.chat_id)

        h.sender.typing = typing  # type: ignore[method-assign]
        await room_says(h, "hello")
        assert len(fake_llm.requests) == 1
    assert typed == []


async def test_an_ignored_chat_is_not_read_at_all(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    async with running_bridge(
        tmp_path, fake_llm, session=rules({"action": "ignore", "match": {"chat_type": "group"}})
    ) as h:
        await room_says(h, "hello?")
        await room_says(h, "/status")
        assert await h.bridge.store.active_session(ROOM) is None
        assert fake_llm.requests == []
        assert to_room(h) == []


async def test_an_owner_command_is_answered_in_an_ignored_chat(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("back"))
    async with running_bridge(
        tmp_path, fake_llm, session=rules({"action": "ignore", "match": {"chat_type": "group"}})
    ) as h:
        await room_says(h, "/send on", sender="owner")
        assert to_room(h)[-1].startswith("Send policy for this session: on, decided by session override")
        await room_says(h, "hello again")
        assert to_room(h)[-1] == "back"


async def test_send_off_on_inherit_set_and_clear_the_override(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("one"), fake.text("two"), fake.text("three"))
    async with running_bridge(
        tmp_path, fake_llm, session=rules({"action": "deny", "match": {"key_prefix": ROOM}})
    ) as h:
        await room_says(h, "/send", sender="owner")
        assert to_room(h)[-1].startswith(
            "Send policy for this session: off, decided by rule 1 (deny: key_prefix=test:group:room)"
        )
        await room_says(h, "/send on", sender="owner")
        await room_says(h, "first")
        assert to_room(h)[-1] == "one"
        await room_says(h, "/send inherit", sender="owner")
        assert "decided by rule 1" in to_room(h)[-1]
        await room_says(h, "second")
        assert "two" not in to_room(h)
        await room_says(h, "/send off", sender="owner")
        assert to_room(h)[-1].startswith(
            "Send policy for this session: off, decided by session override (/send off)"
        )
        await room_says(h, "/send maybe", sender="owner")
        assert to_room(h)[-1].startswith("Usage: /send on|off|inherit")


async def test_a_non_owner_cannot_change_the_send_policy(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    async with running_bridge(tmp_path, fake_llm) as h:
        await room_says(h, "/send off")
        assert to_room(h) == ["Only an owner of this bot can change where it may speak."]
        session = await h.bridge.store.active_session(ROOM)
        assert session is None or session.send_policy is None


async def test_a_non_owners_command_in_a_denied_chat_is_suppressed_too(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_bridge(tmp_path, fake_llm, session=rules({"action": "deny", "match": {}})) as h:
        await room_says(h, "/status")
        await room_says(h, "/send on")
        assert to_room(h) == []


async def test_status_counts_what_the_policy_suppressed(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("a"), fake.text("b"))
    async with running_bridge(
        tmp_path, fake_llm, session=rules({"action": "deny", "match": {"chat_type": "group"}})
    ) as h:
        await room_says(h, "one")
        await room_says(h, "two")
        await room_says(h, "/status", sender="owner")
        status = to_room(h)[-1]
        assert "Suppressed by the send policy: 2" in status
        assert "Send policy: off, decided by rule 1 (deny: chat_type=group)" in status


async def test_the_override_survives_clear(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("quiet"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await room_says(h, "/send off", sender="owner")
        await room_says(h, "/clear", sender="owner")
        await room_says(h, "hello")
        assert "quiet" not in to_room(h)
        session = await h.bridge.store.active_session(ROOM)
        assert session is not None and session.send_policy == "deny"


async def test_default_deny_with_main_allowed_speaks_only_to_the_owner(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("to owner"), fake.text("to stranger"))
    only_owner = rules({"action": "allow", "match": {"key_prefix": "main"}}, default="deny")
    async with running_bridge(tmp_path, fake_llm, session=only_owner) as h:
        await h.say("hi")
        await h.say("hi", sender="stranger")
    assert h.sender.of("reply") == ["to owner"]


async def test_a_refusal_to_a_stranger_follows_the_policy(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    from bridge.gateway.access import SurfaceAccess

    async with running_bridge(tmp_path, fake_llm, session=rules(default="deny")) as h:
        h.bridge.access.surfaces["test"] = SurfaceAccess(frozenset(), frozenset(), True)
        await h.say("let me in", sender="stranger")
        assert h.sender.sent == []
        rows = await h.bridge.store.outbox(state="suppressed")
        assert [r.item.session_key for r in rows] == ["test:dm:stranger"]


async def test_sent_items_are_recorded_with_their_platform_ids(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("hello there"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("hi")
        rows = await h.bridge.store.outbox()
    assert [(r.item.kind, r.item.state, r.platform_msg_id) for r in rows] == [("reply", "sent", "1")]
    assert rows[0].item.dedupe_key == f"reply:{rows[0].item.run_id}"


async def test_a_failed_send_is_recorded_as_failed(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("lost?"))
    async with running_bridge(tmp_path, fake_llm) as h:

        async def broken(item: Any) -> str | None:
            raise ConnectionError("platform down")

        h.sender.send = broken  # type: ignore[method-assign]
        await h.say("hi")
        rows = await h.bridge.store.outbox()
    assert [(r.item.state, r.item.reason) for r in rows] == [("failed", "ConnectionError: platform down")]
