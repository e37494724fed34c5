"""Streamed answers through the dispatcher: shown as they come where the surface can, the reply equal
to what streamed, tool activity between segments, a broken stream kept as shown and /retry-able, a
shadowed chat shown nothing."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from bridge.events import Outbound, Route
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.gateway.test_send_policy import rules
from tests.harness import Harness, RecordingSender, StreamingSender, running_bridge
from tests.waiting import eventually

S = TypeVar("S", bound=RecordingSender)


async def using(h: Harness, sender: S) -> S:
    """`sender` in place of the harness's own, on surface "test"."""
    h.bridge.add_sender(sender)
    h.sender = sender
    return sender


async def streaming(h: Harness) -> StreamingSender:
    return await using(h, StreamingSender())


async def test_the_answer_streams_in_pieces_and_the_reply_is_what_streamed(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    answer = "Streaming makes a slow model feel fast."
    fake_llm.push(fake.text(answer))
    async with running_bridge(tmp_path, fake_llm) as h:
        sender = await streaming(h)
        await h.say("why stream?")
        stored = await h.bridge.store.history((await h.bridge.sessions.active_for_key("main")).id, 50)
    pieces = [text for kind, text in sender.log if kind == "stream"]
    assert len(pieces) > 3 and sender.streamed() == answer
    assert sender.of("reply") == [answer]
    assert sender.log[-1] == ("reply", answer)
    assert fake_llm.requests[0]["stream"] is True
    assert stored[-1].role == "assistant" and stored[-1].content == answer


async def test_tool_activity_goes_between_the_streamed_preamble_and_the_answer(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("get_current_time", {}, content="Let me look at the clock."),
        fake.text("It is noon."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        sender = await streaming(h)
        await h.say("what time is it?")
    kinds = [kind for kind, _ in sender.log]
    first_activity = kinds.index("activity")
    streamed_before = "".join(t for k, t in sender.log[:first_activity] if k == "stream")
    streamed_after = "".join(t for k, t in sender.log[first_activity:] if k == "stream")
    assert streamed_before == "Let me look at the clock."
    assert streamed_after == "It is noon."
    assert sender.of("reply") == ["It is noon."]


async def test_a_stream_cut_after_text_was_shown_keeps_it_with_a_note_and_retry_redoes_it(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.cut(fake.text("The first part and then the connection drops."), after=4),
        fake.text("A whole new answer."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        sender = await streaming(h)
        await h.say("tell me")
        session = await h.bridge.sessions.active_for_key("main")
        after_cut = await h.bridge.store.history(session.id, 50)
        await h.say("/retry")
        after_retry = await h.bridge.store.history(session.id, 50)
    replies = sender.of("reply")
    assert replies[0].startswith("The first pa") and "cut off" in replies[0]
    # Stored is what the chat saw stream in, without the note.
    assert after_cut[-1].role == "assistant" and after_cut[-1].content == "The first pa"
    assert replies[1] == "A whole new answer."
    assert after_retry[-1].content == "A whole new answer."
    # Not retried by the provider: it would have shown the start twice.
    assert len(fake_llm.requests) == 2
    # The redo is asked without the broken answer, as if it had not been said.
    assert [m["role"] for m in fake_llm.requests[1]["messages"]] == ["system", "user"]


async def test_a_shadowed_chat_is_shown_nothing_while_the_answer_streams(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("nobody sees this"))
    async with running_bridge(tmp_path, fake_llm, session=rules(default="deny")) as h:
        sender = await streaming(h)
        await h.say("hello")
    assert sender.log == []
    # Asked without a stream: nobody watches.
    assert "stream" not in fake_llm.requests[0]


async def test_a_surface_that_cannot_stream_gets_the_reply_whole(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("all at once"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("hello")
    assert h.sender.of("reply") == ["all at once"]
    assert "stream" not in fake_llm.requests[0]


@dataclass
class DraftSender(RecordingSender):
    """A surface that edits messages and shows answers as drafts (as Telegram and Discord can)."""

    streams_drafts: bool = True
    min_edit_interval_s: float = 0.2
    # (message id, text, when) for each edit; replies that replaced a draft, by message id.
    timed_edits: list[tuple[str, str, float]] = field(default_factory=list)
    replaced: dict[str, str] = field(default_factory=dict)

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        self.timed_edits.append((message_id, text, time.monotonic()))
        await super().edit(route, message_id, text)

    async def edit_reply(self, route: Route, message_id: str, text: str) -> None:
        self.replaced[message_id] = text

    def message(self, message_id: str) -> str:
        """What a message shows now: the reply that replaced it, else its last edit, else as sent."""
        if message_id in self.replaced:
            return self.replaced[message_id]
        edits = [text for mid, text, _ in self.timed_edits if mid == message_id]
        return edits[-1] if edits else self.sent[int(message_id) - 1].text


async def drafting(h: Harness) -> DraftSender:
    return await using(h, DraftSender())


async def test_the_answer_streams_into_a_draft_that_the_reply_then_replaces(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    answer = "A **draft** grows, edited at the platform's pace, until the reply replaces it."
    fake_llm.push(fake.paced(fake.text(answer), 0.03))
    async with running_bridge(tmp_path, fake_llm) as h:
        sender = await drafting(h)
        await h.say("show me")
        session = await h.bridge.sessions.active_for_key("main")
        stored = await h.bridge.store.history(session.id, 50)
        rows = await h.bridge.store.outbox()
    [draft] = sender.sent
    assert draft.kind == "draft" and answer.startswith(draft.text)
    # Edited as it grew, never faster than the platform allows.
    times = [when for _, _, when in sender.timed_edits]
    assert len(times) >= 2
    assert all(b - a >= 0.2 * 0.9 for a, b in itertools.pairwise(times))
    assert all(answer.startswith(text) for _, text, _ in sender.timed_edits)
    # The reply replaced the draft, formatted; no second message; what shows is what is stored.
    assert sender.message("1") == answer == stored[-1].content
    assert sender.of("reply") == []
    # The reply's row is durable and names the draft it edits; the draft itself was never written.
    assert [(r.item.kind, r.item.edit_of) for r in rows] == [("reply", "1")]


async def test_text_before_tool_calls_keeps_its_own_draft_and_the_answer_gets_a_new_one(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("get_current_time", {}, content="Let me look at the clock."),
        fake.text("It is noon."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        sender = await drafting(h)
        await h.say("what time is it?")
    kinds = [item.kind for item in sender.sent]
    assert kinds == ["draft", "activity", "draft"]
    assert sender.message("1") == "Let me look at the clock."
    assert sender.message("3") == "It is noon."
    assert sender.replaced == {"3": "It is noon."}


async def test_a_shadowed_chat_gets_no_draft(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("nobody sees this"))
    async with running_bridge(tmp_path, fake_llm, session=rules(default="deny")) as h:
        sender = await drafting(h)
        await h.say("hello")
    assert sender.sent == [] and sender.timed_edits == [] and sender.replaced == {}


@dataclass
class LateEditSender(DraftSender):
    """A platform slow to apply a draft's edit, which applies it even if the caller stops waiting (a
    request already on the wire), and shows whichever edit it applied last."""

    applied: dict[str, str] = field(default_factory=dict)
    edit_delay_s: float = 1.0
    landed: int = 0

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        self.timed_edits.append((message_id, text, time.monotonic()))

        async def apply() -> None:
            await asyncio.sleep(self.edit_delay_s)
            self.applied[message_id] = text
            self.landed += 1

        await asyncio.shield(asyncio.ensure_future(apply()))

    async def edit_reply(self, route: Route, message_id: str, text: str) -> None:
        await super().edit_reply(route, message_id, text)
        self.applied[message_id] = text


async def test_a_draft_edit_still_on_its_way_when_the_answer_ends_never_shows_over_the_reply(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The answer ends while an edit of its draft is on its way; the reply must edit the draft after
    that edit lands, or the platform shows the draft's text where the reply should be."""
    answer = "A draft whose last edit is still on its way when the reply comes to replace it."
    fake_llm.push(fake.paced(fake.text(answer), 0.02))
    async with running_bridge(tmp_path, fake_llm) as h:
        sender = await using(h, LateEditSender())
        await h.say("show me")
        assert sender.timed_edits, "no draft edit was on its way"
        await eventually(lambda: sender.landed == len(sender.timed_edits), "every edit to land")
    assert sender.applied["1"] == answer


@dataclass
class SlowDraftSender(DraftSender):
    """A platform slow to take a new message: the answer is complete before its draft is sent."""

    async def send(self, item: Outbound) -> str | None:
        if item.kind == "draft":
            await asyncio.sleep(0.3)
        return await super().send(item)


async def test_a_reply_replaces_a_draft_the_platform_took_its_time_to_send(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # The draft's edits are stopped while its send is still on its way: stopping them must not cancel
    # the send the reply waits for (it did: the run then hung with its row left `running`).
    fake_llm.push(fake.text("Quick answer, slow platform."))
    async with running_bridge(tmp_path, fake_llm) as h:
        sender = await using(h, SlowDraftSender())
        await h.say("hello")
        [(run, _)] = await h.bridge.store.list_runs(session_key="main", limit=1)
    assert run.status == "ok"
    assert sender.replaced == {"1": "Quick answer, slow platform."}


@dataclass
class HangingDraftSender(DraftSender):
    """A platform that never answers a new message: every draft send hangs."""

    async def send(self, item: Outbound) -> str | None:
        if item.kind == "draft":
            await asyncio.Event().wait()
        return await super().send(item)


async def test_a_platform_hanging_on_drafts_never_keeps_the_answer_from_being_stored(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bridge.gateway import streaming as module

    monkeypatch.setattr(module, "DRAFT_WAIT_S", 0.2)
    fake_llm.push(
        fake.tool_call("get_current_time", {}, content="Let me look at the clock."),
        fake.text("It is noon."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await using(h, HangingDraftSender())
        done = await h.bridge.handle(h.inbound("what time is it?"))

        async def answered() -> bool:
            runs = await h.bridge.store.list_runs(session_key="main", limit=1)
            return bool(runs) and runs[0][0].status == "ok"

        deadline = asyncio.get_running_loop().time() + 5
        while not await answered():
            assert asyncio.get_running_loop().time() < deadline, "the answer was never stored"
            await asyncio.sleep(0.05)
        session = await h.bridge.sessions.active_for_key("main")
        stored = await h.bridge.store.history(session.id, 50)
        assert done is not None
        done.cancel()
    assert stored[-1].content == "It is noon."
