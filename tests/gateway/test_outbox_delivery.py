"""The outbox under crashes: chunks are rows, a send in flight is uncertain, a reply goes with its answer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.app import Bridge
from bridge.errors import StoreError
from bridge.events import Inbound, Outbound, Route
from bridge.store.base import OutboxItem
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import OWNER, RecordingSender, make_settings, running_bridge
from tests.invariants import assert_intact, rows


@dataclass
class ChunkingSender(RecordingSender):
    """Sends each line as a message of its own, as a platform with a tiny length limit would."""

    def split(self, kind: str, text: str) -> list[str]:
        return text.split("\n")


@dataclass
class NonceSender(RecordingSender):
    """A platform that drops a second create with a nonce it has seen (Discord's enforce_nonce)."""

    dedupes_by_nonce: bool = True
    seen: dict[str, str] = field(default_factory=dict)

    async def send(self, item: Outbound) -> str | None:
        if item.nonce in self.seen:
            return self.seen[item.nonce]
        message_id = await super().send(item)
        assert item.nonce is not None and message_id is not None
        self.seen[item.nonce] = message_id
        return message_id


@dataclass
class StuckSender(RecordingSender):
    """Never finishes sending to the chats in `stuck` (a long 429 back-off, a hung connection)."""

    stuck: set[str] = field(default_factory=set)
    attempts: list[Outbound] = field(default_factory=list)

    async def send(self, item: Outbound) -> str | None:
        self.attempts.append(item)
        if item.route.chat_id in self.stuck:
            await asyncio.Event().wait()
        return await super().send(item)


def reply_rows(*states: str, text: str = "part") -> list[OutboxItem]:
    """The rows of one three-part reply as a crash left them, one state per part."""
    return [
        OutboxItem(
            kind="reply",
            surface="test",
            chat_id=OWNER,
            text=f"{text} {n}",
            state=state,  # type: ignore[arg-type]
            session_key="main",
            dedupe_key="reply:crashed",
            part=n,
            parts=len(states),
            nonce=f"nonce-{n}",
        )
        for n, state in enumerate(states)
    ]


async def restart(
    tmp_path: Path, llm: FakeOpenAI, sender: RecordingSender, **sections: dict[str, Any]
) -> Bridge:
    # owners named, so that mypy does not take it for one of the **sections.
    bridge = Bridge(make_settings(tmp_path, llm.base_url, owners=None, **sections))
    bridge.add_sender(sender)
    await bridge.start()
    await bridge.recover()
    return bridge


async def test_a_restart_sends_only_the_chunks_not_yet_sent(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.bridge.store.add_outbox(*reply_rows("sent", "sending", "pending"))
    sender = RecordingSender()
    bridge = await restart(tmp_path, fake_llm, sender)
    await bridge.stop()
    # The chunk in flight at the crash goes again (the default), then the one never sent; not part 0.
    assert [item.text for item in sender.sent] == ["part 1", "part 2"]
    assert [item.route.reply_to for item in sender.sent] == [None, None]
    assert rows(tmp_path / "bridge.db", "SELECT state FROM outbox ORDER BY id") == [("sent",)] * 3


async def test_with_resend_uncertain_off_a_chunk_in_flight_is_recorded_uncertain_and_not_sent(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.bridge.store.add_outbox(*reply_rows("sent", "sending", "pending"))
    sender = RecordingSender()
    bridge = await restart(tmp_path, fake_llm, sender, delivery={"resend_uncertain": False})
    await bridge.stop()
    assert [item.text for item in sender.sent] == ["part 2"]
    states = rows(tmp_path / "bridge.db", "SELECT state, reason FROM outbox ORDER BY id")
    assert [s for s, _ in states] == ["sent", "uncertain", "sent"]
    assert "resend_uncertain" in states[1][1]


async def test_a_platform_that_dedupes_by_nonce_gets_the_same_nonce_again_and_posts_once(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    sender = NonceSender()
    # The platform took part 0 just before the crash; its row still says `sending`.
    await sender.send(Outbound(Route("test", OWNER), "reply", "part 0", nonce="nonce-0"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.bridge.store.add_outbox(*reply_rows("sending", "pending"))
    bridge = await restart(tmp_path, fake_llm, sender, delivery={"resend_uncertain": False})
    await bridge.stop()
    assert [item.text for item in sender.sent] == ["part 0", "part 1"]
    assert rows(tmp_path / "bridge.db", "SELECT state, platform_msg_id FROM outbox ORDER BY id") == [
        ("sent", "1"),
        ("sent", "2"),
    ]


async def test_a_long_reply_is_one_row_per_chunk_and_a_failed_chunk_fails_the_rest_of_its_item(
    tmp_path: Path,
) -> None:
    class FailsSecondChunk(ChunkingSender):
        async def send(self, item: Outbound) -> str | None:
            if item.text == "two":
                raise RuntimeError("the platform said no")
            return await super().send(item)

    async with FakeOpenAI() as llm:
        llm.push(fake.text("one\ntwo\nthree"), fake.text("next"))
        settings = make_settings(tmp_path, llm.base_url)
        sender = FailsSecondChunk()
        async with Bridge(settings) as bridge:
            bridge.add_sender(sender)
            for text in ("first", "second"):
                done = await bridge.handle(Inbound("test", "dm", OWNER, OWNER, text, message_id=text))
                assert done is not None
                await asyncio.wait_for(done, 10)
    assert [item.text for item in sender.sent] == ["one", "next"]
    assert rows(tmp_path / "bridge.db", "SELECT text, state, part, parts FROM outbox ORDER BY id") == [
        ("one", "sent", 0, 3),
        ("two", "failed", 1, 3),
        ("three", "failed", 2, 3),
        ("next", "sent", 0, 1),
    ]


async def test_the_reply_is_queued_with_the_answer_so_a_crash_before_it_is_sent_loses_nothing(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("It is noon."))
    stuck = StuckSender(stuck={OWNER})
    settings = make_settings(tmp_path, fake_llm.base_url)
    bridge = Bridge(settings)
    bridge.add_sender(stuck)
    await bridge.start()
    finished = asyncio.Event()
    finish_run = bridge.store.finish_run

    async def finish_and_tell(*args: Any, **kwargs: Any) -> list[int]:
        try:
            return await finish_run(*args, **kwargs)
        finally:
            finished.set()

    bridge.store.finish_run = finish_and_tell  # type: ignore[method-assign]
    await bridge.handle(Inbound("test", "dm", OWNER, OWNER, "time?", message_id="1"))
    db = tmp_path / "bridge.db"
    # The activity display is stuck at the platform; the answer is stored, and its reply row with it.
    await asyncio.wait_for(finished.wait(), 10)
    assert rows(db, "SELECT status FROM runs") == [("ok",)]
    assert rows(db, "SELECT kind, state FROM outbox ORDER BY id") == [
        ("activity", "sending"),
        ("reply", "pending"),
    ]
    # A kill here: nothing more is written. The next start sends the reply (not the stale activity).
    await bridge.store.close()
    # A killed process's sockets close with it; here the model client's must be closed by hand.
    await bridge.profiles.aclose()
    sender = RecordingSender()
    bridge = await restart(tmp_path, fake_llm, sender)
    await bridge.stop()
    assert [(item.kind, item.text) for item in sender.sent] == [("reply", "It is noon.")]
    assert_intact(db, ["time?"])


async def test_interrupted_notices_are_queued_with_the_abort_so_a_second_crash_cannot_lose_them(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_bridge(tmp_path, fake_llm) as h:
        session = await h.bridge.sessions.active(h.inbound("summarise my week"))
        upto = await h.bridge.store.add_user_message(session.id, "summarise my week")
        await h.bridge.store.start_run("crashed-run", session.id, "test", "h", upto)
    # Start-up marks the run aborted; then a second kill before the adapters are up.
    bridge = Bridge(make_settings(tmp_path, fake_llm.base_url))
    await bridge.start()
    await bridge.store.close()
    db = tmp_path / "bridge.db"
    assert rows(db, "SELECT status FROM runs") == [("aborted",)]
    assert rows(db, "SELECT kind, state FROM outbox") == [("notice", "pending")]
    sender = RecordingSender()
    bridge = await restart(tmp_path, fake_llm, sender)
    await bridge.stop()
    [notice] = sender.of("notice")
    assert "interrupted" in notice and "summarise my week" in notice


async def test_a_chat_stuck_at_the_platform_holds_up_neither_intake_nor_other_chats(tmp_path: Path) -> None:
    sender = StuckSender(stuck={"stuck-chat"})
    async with FakeOpenAI(lambda body: fake.text(f"re: {body['messages'][-1]['content']}")) as llm:
        settings = make_settings(tmp_path, llm.base_url, owners=["test:boss"])
        async with Bridge(settings) as bridge:
            bridge.add_sender(sender)
            # A reply and an owner's command answer are both stuck at the platform...
            async with asyncio.timeout(2):
                stuck = await bridge.handle(
                    Inbound("test", "dm", "stuck-chat", "someone", "hello", message_id="a")
                )
                await bridge.handle(
                    Inbound("test", "group", "stuck-chat", "boss", "/status", message_id="b", mentioned=True)
                )
                done = await bridge.handle(Inbound("test", "dm", "boss", "boss", "hi", message_id="c"))
            # ...while intake returned at once and the other chat is answered.
            assert stuck is not None and done is not None
            await asyncio.wait_for(done, 10)
            assert sender.of("reply") == ["re: hi"]
            assert [item.route.chat_id for item in sender.attempts].count("stuck-chat") == 1
    db = tmp_path / "bridge.db"
    # Both items for the stuck chat are written down, the first one in flight and the other behind it
    # (in whichever order they came): the next start sends what did not go.
    stuck_rows = dict(rows(db, "SELECT kind, state FROM outbox WHERE chat_id = 'stuck-chat'"))
    [in_flight] = [item.kind for item in sender.attempts if item.route.chat_id == "stuck-chat"]
    assert sorted(stuck_rows) == ["notice", "reply"]
    assert stuck_rows.pop(in_flight) == "sending"
    assert list(stuck_rows.values()) == ["pending"]


async def test_a_run_whose_answer_cannot_be_stored_ends_as_an_error_the_user_is_told_about(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("an answer that will not fit"), fake.text("fine again"))
    async with running_bridge(tmp_path, fake_llm) as h:
        finish_run = h.bridge.store.finish_run
        failures = iter([StoreError("database is full")])

        async def fail_once(*args: Any, **kwargs: Any) -> list[int]:
            if kwargs.get("reply") is not None and (error := next(failures, None)) is not None:
                raise error
            return await finish_run(*args, **kwargs)

        h.bridge.store.finish_run = fail_once  # type: ignore[method-assign]
        await h.say("hello")
        await h.say("again")
    [first, second] = h.sender.of("reply")
    assert first.startswith("⚠️ Something went wrong") and "/retry" in first
    assert second == "fine again"
    db = tmp_path / "bridge.db"
    assert rows(db, "SELECT status FROM runs ORDER BY started_at") == [("error",), ("ok",)]
    assert_intact(db, ["hello", "again"])
