"""Streamed answers through the dispatcher: shown as they come where the surface can, the reply equal
to what streamed, tool activity between segments, a broken stream kept as shown and /retry-able, a
shadowed chat shown nothing."""

from __future__ import annotations

from pathlib import Path

from tests.fakes import openai_server as fake
from tests.fakes.openai_server import FakeOpenAI
from tests.gateway.test_send_policy import rules
from tests.harness import Harness, StreamingSender, running_bridge


async def streaming(h: Harness) -> StreamingSender:
    sender = StreamingSender()
    h.bridge.add_sender(sender)
    h.sender = sender
    return sender


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
