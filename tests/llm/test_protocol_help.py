"""Help for small models: a bare tool name or a call with a made-up result is corrected once, then made
safe, and neither the name, the call nor the made-up result ever reaches the user as the answer."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from bridge.llm.base import ChatMessage, Completion, ToolCall
from bridge.llm.textmode import (
    FENCE_CORRECTION,
    NOT_RUN,
    RESULT_CORRECTION,
    NativeModeProvider,
    TextModeProvider,
    parse_reply,
    without_calls,
)
from bridge.llm.textprompt import render_call
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.agent.test_text_mode import TEXT, fenced
from tests.harness import Harness, running_bridge
from tests.invariants import rows
from tests.llm.test_textmode import block


def tool(name: str, *required: str) -> dict[str, Any]:
    properties = {key: {"type": "string"} for key in required}
    parameters = {"type": "object", "properties": properties, "required": list(required)}
    return {"type": "function", "function": {"name": name, "description": "", "parameters": parameters}}


TOOLS = [tool("get_current_time"), tool("read_file", "path")]
QUESTION = [ChatMessage("system", "Be brief."), ChatMessage("user", "what time is it?")]
CALL = {"tool_name": "get_current_time", "arguments": {}}
INVENTED = "[tool.result of get_current_time]\n2021-01-01 09:41"


def corrected(reply: str, correction: str = FENCE_CORRECTION) -> list[ChatMessage]:
    """The question after the runner's one correction of this run: the model's reply, then the note."""
    return [*QUESTION, ChatMessage("assistant", reply), ChatMessage("user", correction)]


class Scripted:
    """An inner provider that answers each request with the next scripted text."""

    def __init__(self, *replies: str) -> None:
        self.replies = deque(replies)

    async def complete(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]], sink: Any = None
    ) -> Completion:
        return Completion(content=self.replies.popleft())

    async def aclose(self) -> None:
        return None


async def in_text_mode(
    reply: str,
    messages: list[ChatMessage] = QUESTION,
    tools: list[dict[str, Any]] = TOOLS,
    *,
    known: frozenset[str] = frozenset(),
) -> Completion:
    provider = TextModeProvider(Scripted(reply), known=lambda name: name in known)
    return await provider.complete(messages, tools)


async def in_native_mode(
    reply: str, messages: list[ChatMessage] = QUESTION, tools: list[dict[str, Any]] = TOOLS
) -> Completion:
    return await NativeModeProvider(Scripted(reply)).complete(messages, tools)


# -- a bare tool name ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        "get_current_time",
        "  `get_current_time`\n",
        "get_current_time()",
        "get_current_time( )",
        "get_current_time.",
        "```get_current_time```",
        "```tool\nget_current_time()\n```",
    ],
)
async def test_a_reply_that_is_only_a_tool_name_is_corrected_with_the_block_that_calls_it(reply: str) -> None:
    completion = await in_text_mode(reply)
    assert completion.tool_calls == ()
    assert completion.correction is not None and completion.correction.startswith(NOT_RUN)
    assert render_call(ToolCall("", "get_current_time", "{}")) in completion.correction
    # The model sees its own reply before the note, as written.
    assert completion.content == reply


async def test_the_block_in_a_name_correction_is_itself_a_valid_call_naming_the_required_arguments() -> None:
    completion = await in_text_mode("read_file")
    assert completion.correction is not None
    parsed = parse_reply(completion.correction, {"read_file"})
    assert parsed.call is not None and json.loads(parsed.call.arguments) == {"path": "<path>"}


async def test_the_name_of_a_tool_that_exists_but_is_not_loaded_is_corrected_too() -> None:
    completion = await in_text_mode("pdf_info", known=frozenset({"pdf_info"}))
    assert completion.correction is not None and "pdf_info" in completion.correction


async def test_in_native_mode_a_bare_name_is_corrected_to_a_tool_call_or_plain_words() -> None:
    completion = await in_native_mode("get_current_time()")
    assert completion.tool_calls == ()
    assert completion.correction is not None and completion.correction.startswith(NOT_RUN)
    assert "get_current_time" in completion.correction and "tool call" in completion.correction
    assert "```" not in completion.correction


async def test_in_native_mode_with_no_tools_offered_a_bare_name_is_left_as_the_answer() -> None:
    completion = await in_native_mode("get_current_time", tools=[])
    assert completion.correction is None and completion.content == "get_current_time"


async def test_a_second_bare_name_in_a_run_calls_a_tool_that_needs_no_arguments() -> None:
    for complete in (in_text_mode, in_native_mode):
        completion = await complete("get_current_time", corrected("get_current_time"))
        assert completion.correction is None and completion.content == ""
        [call] = completion.tool_calls
        assert (call.name, call.arguments) == ("get_current_time", "{}")


async def test_a_second_bare_name_of_a_tool_that_needs_arguments_runs_nothing_and_shows_nothing() -> None:
    for complete in (in_text_mode, in_native_mode):
        completion = await complete("read_file", corrected("read_file"))
        assert completion.correction is None
        assert completion.tool_calls == () and completion.content == ""


@pytest.mark.parametrize(
    "reply",
    [
        "Use get_current_time to see the time.",
        "get_current_time is the tool for that.",
        "`get_current_time` tells the time.",
        "hello",
        "Done.",
        "rm_rf",
        "tool.result",
        "get_current_time(timezone='UTC') would do it",
    ],
)
async def test_prose_that_mentions_a_tool_and_names_of_no_tool_are_answers(reply: str) -> None:
    for complete in (in_text_mode, in_native_mode):
        completion = await complete(reply)
        assert completion.correction is None and completion.tool_calls == ()
        assert completion.content == reply


# -- a call with a made-up result ---------------------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        INVENTED,
        "Result: 09:41",
        "Output:\n09:41",
        block({"time": "09:41"}),
        "It is 09:41.",
        block({"tool_name": "read_file", "arguments": {"path": "a"}}, "tool"),
    ],
)
async def test_a_call_followed_by_any_text_is_not_run_and_the_model_is_told_to_stop_after_the_block(
    tail: str,
) -> None:
    completion = await in_text_mode(f"{block(CALL, 'tool')}\n{tail}")
    assert completion.tool_calls == ()
    assert completion.correction == RESULT_CORRECTION


async def test_after_the_runs_correction_the_call_runs_and_everything_after_its_block_is_dropped() -> None:
    reply = f"Let me check.\n{block(CALL, 'tool')}\n{INVENTED}"
    completion = await in_text_mode(reply, corrected(reply, RESULT_CORRECTION))
    assert completion.correction is None
    assert [c.name for c in completion.tool_calls] == ["get_current_time"]
    assert completion.content == "Let me check."


async def test_a_run_corrected_once_for_a_bare_object_is_not_corrected_again_for_a_made_up_result() -> None:
    bare = json.dumps(CALL)
    completion = await in_text_mode(f"{block(CALL)}\n{INVENTED}", corrected(bare))
    assert completion.correction is None and completion.content == ""
    assert [c.name for c in completion.tool_calls] == ["get_current_time"]


async def test_with_no_tools_offered_a_call_and_its_made_up_result_never_become_the_answer() -> None:
    # The runner's last request offers no tools and uses only the text; a correction would be ignored.
    for reply in (f"So:\n{block(CALL)}\n{INVENTED}", json.dumps(CALL)):
        completion = await in_text_mode(reply, tools=[], known=frozenset({"get_current_time"}))
        assert completion.correction is None
        assert "09:41" not in completion.content and "get_current_time" not in completion.content


@pytest.mark.parametrize("reply", ["[tool.result]", INVENTED, "  [Tool result of read_file]\nhello"])
async def test_a_reply_that_is_a_result_marker_is_corrected_once_then_is_no_answer(reply: str) -> None:
    # Qwen2.5-Coder-1.5B answers "Remember this: ..." with the marker alone.
    first = await in_text_mode(reply)
    assert first.correction == RESULT_CORRECTION and not first.tool_calls
    again = await in_text_mode(reply, corrected("[tool.result]", RESULT_CORRECTION))
    assert again.correction is None and again.content == ""
    last = await in_text_mode(reply, tools=[])
    assert last.content == "" and without_calls(reply) == ""


async def test_an_answer_that_mentions_a_tool_result_later_is_an_answer() -> None:
    reply = "The clock says 09:41. [tool.result] is how results are marked."
    completion = await in_text_mode(reply)
    assert completion.correction is None and completion.content == reply


async def test_a_second_bare_call_object_in_a_run_runs_instead_of_being_shown() -> None:
    bare = json.dumps(CALL)
    completion = await in_text_mode(bare, corrected(bare))
    assert completion.correction is None and completion.content == ""
    assert [c.name for c in completion.tool_calls] == ["get_current_time"]


async def test_text_before_a_call_block_is_its_preamble_as_before() -> None:
    completion = await in_text_mode(f"Checking the clock.\n{block(CALL, 'tool')}\n\n")
    assert completion.correction is None
    assert completion.content == "Checking the clock."
    assert [c.name for c in completion.tool_calls] == ["get_current_time"]


async def test_a_json_block_in_prose_after_an_answer_is_not_a_made_up_result() -> None:
    reply = f"It is 09:41. In JSON:\n{block({'time': '09:41'})}\nAnything else?"
    completion = await in_text_mode(reply)
    assert completion.correction is None and completion.tool_calls == ()
    assert completion.content == reply


async def test_in_native_mode_text_after_a_call_left_in_the_text_is_dropped_without_a_correction() -> None:
    completion = await in_native_mode(f"Checking.\n{block(CALL)}\n{INVENTED}")
    assert completion.correction is None
    assert [c.name for c in completion.tool_calls] == ["get_current_time"]
    assert completion.content == "Checking."


def test_a_parsed_call_keeps_the_text_before_and_after_its_block_apart() -> None:
    parsed = parse_reply(f"Before.\n{block(CALL)}\nAfter.", {"get_current_time"})
    assert (parsed.preamble, parsed.tail) == ("Before.", "After.")
    assert parsed.without_tail().text == "Before."


# -- end to end, through the runner and the fake model server -------------------------------------


def everything_shown(h: Harness, db: Path) -> list[str]:
    """Every text the bot sent or queued: sent items, edits and outbox rows."""
    outbox = [text for (text,) in rows(db, "SELECT text FROM outbox")]
    return [item.text for item in h.sender.sent] + [text for _, text in h.sender.edits] + outbox


def history(db: Path) -> list[tuple[str, str]]:
    return rows(db, "SELECT kind, content FROM messages ORDER BY id")


async def test_a_bare_name_is_corrected_once_then_called_and_the_user_only_sees_the_answer(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("get_current_time"), fenced("get_current_time", {}), fake.text("It is noon."))
    async with running_bridge(tmp_path, fake_llm, llm=TEXT) as h:
        await h.say("what time is it?")
    note = fake_llm.requests[1]["messages"][-2:]
    assert note[0] == {"role": "assistant", "content": "get_current_time"}
    assert note[1]["role"] == "user" and note[1]["content"].startswith(NOT_RUN)
    assert '{"tool_name": "get_current_time", "arguments": {}}' in note[1]["content"]
    assert h.sender.of("reply") == ["It is noon."]
    db = tmp_path / "bridge.db"
    assert [kind for kind, _ in history(db)] == ["user", "tool_call", "tool_result", "assistant"]
    assert not any(NOT_RUN in content for _, content in history(db))


async def test_in_native_mode_a_bare_name_is_corrected_once_then_called(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("get_current_time"), fake.tool_call("get_current_time", {}), fake.text("Noon."))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("what time is it?")
    assert fake_llm.requests[1]["messages"][-1]["content"].startswith(NOT_RUN)
    assert h.sender.of("reply") == ["Noon."]


async def test_a_bare_name_ignoring_the_correction_calls_the_tool_rather_than_showing_its_name(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("get_current_time"), fake.text("`get_current_time`"), fake.text("Noon."))
    async with running_bridge(tmp_path, fake_llm, llm=TEXT) as h:
        await h.say("what time is it?")
    assert fake_llm.requests[2]["messages"][-1]["content"].startswith("[tool.result of get_current_time]")
    assert h.sender.of("reply") == ["Noon."]
    assert not any("`get_current_time`" in text for text in everything_shown(h, tmp_path / "bridge.db"))


async def test_a_made_up_result_is_corrected_and_never_shown_nor_stored(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    reply = fake.text(f"Checking.\n{block(CALL)}\n{INVENTED}")
    fake_llm.push(reply, fenced("get_current_time", {}), fake.text("It is noon."))
    async with running_bridge(tmp_path, fake_llm, llm=TEXT) as h:
        await h.say("what time is it?")
    assert fake_llm.requests[1]["messages"][-1]["content"] == RESULT_CORRECTION
    assert h.sender.of("reply") == ["It is noon."]
    db = tmp_path / "bridge.db"
    assert not any("09:41" in text for text in everything_shown(h, db))
    assert not any("09:41" in content for _, content in history(db))


async def test_a_made_up_result_after_the_correction_is_dropped_and_the_call_runs(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    reply = f"Checking.\n{block(CALL, 'tool')}\n{INVENTED}"
    fake_llm.push(fake.text(reply), fake.text(reply), fake.text("It is noon."))
    async with running_bridge(tmp_path, fake_llm, llm=TEXT) as h:
        await h.say("what time is it?")
    assert len(fake_llm.requests) == 3
    assert fake_llm.requests[2]["messages"][-1]["content"].startswith("[tool.result of get_current_time]")
    assert h.sender.of("reply") == ["It is noon."]
    db = tmp_path / "bridge.db"
    assert not any("09:41" in text for text in everything_shown(h, db))
    assert not any("09:41" in content for _, content in history(db))
    # The text before the block stays, as the call's preamble.
    assert ("tool_call", "Checking.") in history(db)


async def test_answers_that_mention_a_tool_or_show_json_reach_the_user_as_written(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    answers = [
        "Ask me and I will use get_current_time for you.",
        f"Here is the format:\n{block({'time': '09:41'})}\nThat is all.",
        "get_current_time tells the time.",
    ]
    fake_llm.push(*(fake.text(answer) for answer in answers))
    async with running_bridge(tmp_path, fake_llm, llm=TEXT) as h:
        for question in ("which tool?", "show json", "what does it do?"):
            await h.say(question)
    assert len(fake_llm.requests) == 3
    assert h.sender.of("reply") == answers
    assert h.sender.of("activity") == []


# -- calls written the ways small models write them ------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "arguments"),
    [
        ('read_file(path: "notes.txt")', {"path": "notes.txt"}),
        ('read_file(path="a, b.txt")', {"path": "a, b.txt"}),
        ("get_current_time(timezone: Asia/Tokyo)", {"timezone": "Asia/Tokyo"}),
        # A lone value is the one argument the tool requires (load_tool_group(sessions), as a 0.5B
        # model writes it).
        ('read_file("my notes.txt")', {"path": "my notes.txt"}),
        ("read_file(notes.txt)", {"path": "notes.txt"}),
    ],
)
async def test_a_call_written_as_a_function_with_its_arguments_runs_at_once(
    reply: str, arguments: dict[str, Any]
) -> None:
    # Corrected first, the 0.5B model wrote the name alone next, and the arguments were lost.
    for complete in (in_text_mode, in_native_mode):
        for asked in (QUESTION, corrected(reply)):
            completion = await complete(reply, asked)
            [call] = completion.tool_calls
            assert json.loads(call.arguments) == arguments
            assert completion.content == "" and completion.correction is None


async def test_a_function_call_whose_arguments_cannot_be_read_runs_nothing_and_shows_nothing() -> None:
    completion = await in_text_mode("read_file(the notes file)", corrected("x"))
    assert completion.tool_calls == () and completion.content == ""


async def test_a_lone_value_is_not_guessed_for_a_tool_that_requires_no_argument_or_several() -> None:
    two = [*TOOLS, tool("write_file", "path", "content")]
    for reply in ("get_current_time(UTC)", "write_file(notes.txt)"):
        completion = await in_text_mode(reply, corrected("x"), two)
        assert completion.tool_calls == () and completion.content == ""


async def test_a_tool_name_copied_with_its_signature_from_the_tool_list_is_still_the_call() -> None:
    reply = block({"tool_name": "get_current_time(timezone: string)", "arguments": {"timezone": "UTC"}})
    completion = await in_text_mode(reply)
    [call] = completion.tool_calls
    assert call.name == "get_current_time" and json.loads(call.arguments) == {"timezone": "UTC"}


async def test_made_up_results_inside_the_call_block_itself_are_corrected_then_dropped() -> None:
    reply = (
        '```tool\n{"tool_name": "get_current_time", "arguments": {}}\n'
        '{"tool.result": "2026-11-23 12:00:00"}\n```'
    )
    first = await in_text_mode(reply)
    assert first.correction == RESULT_CORRECTION
    second = await in_text_mode(reply, corrected(reply, RESULT_CORRECTION))
    assert [c.name for c in second.tool_calls] == ["get_current_time"]
    assert "12:00" not in second.content


@pytest.mark.parametrize(
    ("answer", "left"),
    [
        ('```json\n{"name": "load_tool_group", "arguments": {"group_name": "x"}}\n```', ""),
        ('```tool\n{"tool.result": "no more tool calls"}\n```', ""),
        ('{"tool_name": "get_current_time", "arguments": {}}', ""),
        ('It is noon.\n\n```tool\n{"tool_name": "get_current_time", "arguments": {}}\n```', "It is noon."),
        ('It is noon.\n```json\n{"hour": 12}\n```', 'It is noon.\n```json\n{"hour": 12}\n```'),
    ],
)
def test_without_calls_takes_out_everything_call_shaped_and_keeps_data(answer: str, left: str) -> None:
    assert without_calls(answer) == left


async def test_a_group_written_as_a_call_is_a_call_but_a_group_name_alone_is_an_answer() -> None:
    provider = TextModeProvider(
        Scripted(block({"tool_name": "files", "arguments": {}}), "files"), groups=lambda name: name == "files"
    )
    call = await provider.complete(QUESTION, TOOLS)
    assert [c.name for c in call.tool_calls] == ["files"]
    answer = await provider.complete(QUESTION, TOOLS)
    assert answer.correction is None and answer.tool_calls == () and answer.content == "files"


# -- a tool the model made up ------------------------------------------------------------------------


async def test_a_made_up_tool_in_a_tool_block_is_named_to_the_model_once_then_never_shown() -> None:
    reply = "I'll set that up.\n" + block({"tool_name": "remind", "arguments": {"in": "20m"}}, "tool")
    first = await in_text_mode(reply)
    assert first.tool_calls == () and first.correction is not None
    assert "There is no tool named remind" in first.correction and "load_tool_group" in first.correction
    # Once the run was corrected, the block is dropped and only the words around it are the answer.
    second = await in_text_mode(reply, corrected(reply))
    assert second.tool_calls == () and second.correction is None
    assert second.content == "I'll set that up."


async def test_a_json_block_naming_no_tool_is_content_not_a_made_up_call() -> None:
    reply = "The format is:\n" + block({"tool_name": "remind", "arguments": {}})
    completion = await in_text_mode(reply)
    assert completion.correction is None and completion.content == reply


async def test_a_made_up_tool_in_a_real_run_is_corrected_and_the_model_recovers(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.text(block({"tool_name": "remind", "arguments": {"message": "water"}}, "tool")),
        fenced("get_current_time", {}),
        fake.text("It is noon; I can't set reminders without the scheduled_tasks group."),
    )
    async with running_bridge(tmp_path, fake_llm, llm=TEXT) as h:
        await h.say("remind me to drink water")
    assert h.sender.of("reply") == ["It is noon; I can't set reminders without the scheduled_tasks group."]
    told = fake_llm.requests[1]["messages"][-1]["content"]
    assert told.startswith(NOT_RUN) and "There is no tool named remind" in told
