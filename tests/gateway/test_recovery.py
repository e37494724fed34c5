"""After a crash: interrupted runs are closed, their chats told once, and /retry answers the message."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

from bridge.store.base import OutboxItem
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from tests.harness import OWNER, running_bridge
from tests.invariants import assert_intact


async def crash_mid_run(tmp_path: Path, fake_llm: FakeOpenAI, text: str) -> None:
    """Leave the store as a kill -9 during a run would: the message stored, the run 'running'."""
    async with running_bridge(tmp_path, fake_llm) as h:
        session = await h.bridge.sessions.active(h.inbound(text))
        upto = await h.bridge.store.add_user_message(session.id, text, sender=f"test:{OWNER}")
        await h.bridge.store.start_run("crashed-run", session.id, "test", "h", upto)


async def test_an_interrupted_run_is_aborted_and_its_chat_told_once(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    await crash_mid_run(tmp_path, fake_llm, "summarise my week")
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.bridge.recover()
        [notice] = h.sender.of("notice")
        assert "interrupted" in notice and "“summarise my week”" in notice and "/retry" in notice
        run = await h.bridge.store.get_run("crashed-run")
        assert run is not None and run.status == "aborted"
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.bridge.recover()
        assert h.sender.of("notice") == []


async def test_retry_answers_the_interrupted_message(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    await crash_mid_run(tmp_path, fake_llm, "summarise my week")
    fake_llm.push(fake.text("Your week: busy."))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.bridge.recover()
        await h.say("/retry")
        assert h.sender.of("reply") == ["Your week: busy."]
        user_turns = [m for m in fake_llm.requests[0]["messages"] if m["role"] == "user"]
        assert [m["content"] for m in user_turns] == ["summarise my week"]
        await h.say("/retry")
        assert h.sender.of("notice")[-1] == "Nothing to retry: your last message has its answer."
        assert len(fake_llm.requests) == 1


async def test_retry_after_a_model_error_works_and_history_holds_the_message_once(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.http_error(400, "bad request"), fake.text("second try worked"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("hello")
        assert h.sender.of("reply")[0].startswith("⚠️")
        await h.say("/retry")
        assert h.sender.of("reply")[-1] == "second try worked"
        session = await h.bridge.store.active_session("main")
        assert session is not None
        rows = await h.bridge.store.history(session.id, 10)
        assert [(r.kind, r.content) for r in rows] == [("user", "hello"), ("assistant", "second try worked")]
        assert json.dumps(fake_llm.requests[1]["messages"]).count("hello") == 1


async def test_items_a_crash_left_pending_are_delivered_once_after_the_restart(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_bridge(tmp_path, fake_llm) as h:
        session = await h.bridge.store.ensure_active_session("main")
        for kind, text in (("reply", "the lost answer"), ("activity", "⚙ old tool …"), ("notice", "later")):
            item = OutboxItem(
                kind=kind,
                text=text,
                state="pending",
                surface="test",
                chat_id=OWNER,
                session_key="main",
                session_id=session.id,
            )
            await h.bridge.store.add_outbox(item)
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.bridge.recover()
        assert [(i.kind, i.text) for i in h.sender.sent] == [
            ("reply", "the lost answer"),
            ("notice", "later"),
        ]
        states = [(r.item.text, r.item.state) for r in await h.bridge.store.outbox()]
    assert states == [("the lost answer", "sent"), ("⚙ old tool …", "failed"), ("later", "sent")]
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.bridge.recover()
        assert h.sender.sent == []


async def test_a_message_waiting_behind_an_answer_at_shutdown_is_answered_at_the_next_start(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()

    async def model(body: dict[str, Any]) -> Reply:
        asked = body["messages"][-1]["content"]
        if asked == "first":
            await release.wait()
        return fake.text(f"answer to: {asked}")

    async with FakeOpenAI(model) as llm:
        async with running_bridge(tmp_path, llm) as h:
            await h.bridge.handle(h.inbound("first"))
            await llm.wait_for_requests(1)
            await h.bridge.handle(h.inbound("second"))  # stored; waits behind the first answer
            release.set()  # the first answer is stored during the shutdown's grace period, after "second"
            await h.bridge.shutdown()
            assert h.sender.of("reply") == ["answer to: first"]
        async with running_bridge(tmp_path, llm) as h:
            h.sender._ids = itertools.count(100)  # the platform's ids go on from where they were
            await h.bridge.recover()
            await asyncio.wait_for(h.bridge.lanes.idle(), 10)
            assert h.sender.of("reply") == ["answer to: second"]
    assert_intact(tmp_path / "bridge.db", ["first", "second"])


async def test_a_reply_written_while_start_up_recovery_reads_the_outbox_is_sent_once(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # `bridge run` starts listening, then catches up in the background: a message answered in
    # between has its reply rows open (pending, then sending) when the catch-up reads the outbox.
    fake_llm.push(fake.text("answered while catching up"))
    async with running_bridge(tmp_path, fake_llm) as h:
        sender, store = h.sender, h.bridge.store
        real_send, real_outbox = sender.send, store.outbox
        on_its_way, release, looked = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def slow_send(item: Any) -> str | None:
            on_its_way.set()  # marked `sending`, handed to the platform
            await release.wait()
            return await real_send(item)

        async def outbox_then_tell(**kwargs: Any) -> Any:
            found = await real_outbox(**kwargs)
            looked.set()
            return found

        sender.send = slow_send  # type: ignore[method-assign]
        store.outbox = outbox_then_tell  # type: ignore[method-assign]
        done = await h.bridge.handle(h.inbound("hello"))
        assert done is not None
        await asyncio.wait_for(on_its_way.wait(), 10)
        catching_up = asyncio.create_task(h.bridge.recover())
        await asyncio.wait_for(looked.wait(), 10)  # the catch-up has read the outbox
        await asyncio.sleep(0)  # and queued what it found
        release.set()
        await asyncio.wait_for(asyncio.gather(done, catching_up), 10)
        await h.bridge.delivery.idle()
        assert sender.of("reply") == ["answered while catching up"]


async def test_a_message_that_arrives_while_start_up_recovery_runs_is_answered_once_by_the_live_path(
    tmp_path: Path, fake_llm: FakeOpenAI, caplog: Any
) -> None:
    # The adapters listen before the catch-up begins: a message stored in between, its run not yet
    # begun, is the live traffic's, not one "from before the restart" for the catch-up to answer again.
    fake_llm.push(fake.text("answered once"))
    async with running_bridge(tmp_path, fake_llm) as h:
        store = h.bridge.store
        real_begin = store.begin_run
        beginning, let_begin = asyncio.Event(), asyncio.Event()

        async def held_begin(*args: Any, **kwargs: Any) -> Any:
            beginning.set()  # the message is stored; its run is about to claim it
            await let_begin.wait()
            return await real_begin(*args, **kwargs)

        store.begin_run = held_begin  # type: ignore[method-assign]
        caplog.set_level("INFO", logger="bridge.gateway.dispatcher")
        done = await h.bridge.handle(h.inbound("hello"))
        assert done is not None
        await asyncio.wait_for(beginning.wait(), 10)
        await h.bridge.recover()  # the catch-up runs in that moment
        let_begin.set()
        await asyncio.wait_for(done, 10)
        await h.bridge.lanes.idle()
        await h.bridge.delivery.idle()
    assert h.sender.of("reply") == ["answered once"]
    assert len(fake_llm.requests) == 1
    assert not [r for r in caplog.records if "before the restart" in r.getMessage()]
