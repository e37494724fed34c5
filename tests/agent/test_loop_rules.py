"""Loop and storm detection: every unproductive pattern stops fast, legitimate work keeps going."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from zoneinfo import available_timezones

import pytest

from bridge.agent.loops import FINAL_QUESTION, FINAL_REQUEST
from bridge.agent.trace import format_trace
from bridge.config.io import load_settings
from bridge.errors import ConfigError
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import Harness, pdf_group, running_bridge


async def _last_run(h: Harness) -> tuple[Any, dict[str, Any], str]:
    run_id = h.sender.sent[-1].run_id
    assert run_id is not None
    run = await h.bridge.store.get_run(run_id)
    text = await h.bridge.store.get_trace(run_id) or "{}"
    return run, json.loads(text), text


def _ran(trace: dict[str, Any]) -> list[str]:
    return [step["name"] for step in trace["steps"] if step["type"] == "tool"]


def _every_call_has_its_result(body: dict[str, Any]) -> bool:
    """What an OpenAI-compatible server checks: each replayed call is followed by its result."""
    asked = [c["id"] for m in body["messages"] for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
    return sorted(asked) == sorted(answered)


async def test_an_a_b_a_b_cycle_stops_at_the_first_repeat_of_a_call_that_succeeded(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # What Qwen2.5-Coder-1.5B did for 12 steps: alternate two tools with the same arguments.
    cycle = [
        fake.tool_call("get_current_time", {"timezone": "UTC"}),
        fake.tool_call("search_history", {"query": "sessions"}),
    ]
    fake_llm.push(*cycle, cycle[0], fake.text("You have one session."))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("what are my sessions?")
        run, trace, text = await _last_run(h)
    # Two calls ran, the third (a repeat of the first) did not; then one request without tools.
    assert _ran(trace) == ["get_current_time", "search_history"]
    assert len(fake_llm.requests) == 4 and "tools" not in fake_llm.requests[3]
    assert h.sender.of("reply") == ["You have one session."]
    assert run.status == "stopped" and "kept calling `get_current_time`" in run.error
    assert trace["stop_rule"] == "repeated_call"
    assert "stopped by loop rule repeated_call" in format_trace(text)


async def test_a_repeat_is_recognised_whatever_the_key_order_spacing_or_null_arguments(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("search_history", {"query": "cats", "limit": 5}),
        fake.tool_call("get_current_time", {}),
        fake.tool_call("search_history", '{"limit": 5, "query": " cats ", "extra": null}'),
        fake.text("Nothing about cats."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("find cats")
        _, trace, _ = await _last_run(h)
    assert _ran(trace) == ["search_history", "get_current_time"]
    assert trace["stop_rule"] == "repeated_call"


async def test_three_failing_calls_in_a_row_stop_the_run_whatever_the_tools_or_arguments(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("get_current_time", {"timezone": "Mars/Olympus"}),
        fake.tool_call("load_tool_group", {"group_name": "no_such_group"}),
        fake.tool_call("get_current_time", {"timezone": "Venus/Maxwell"}),
        *(fake.tool_call("get_current_time", {"timezone": f"Nowhere/{n}"}) for n in range(10)),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time on mars?")
        run, trace, _ = await _last_run(h)
    assert len(_ran(trace)) == 3
    assert trace["stop_rule"] == "failure_streak"
    assert "failed 3 times in a row" in run.error and "`load_tool_group`" in run.error
    # The last request had no tools and its (scripted) answer was a call: the reply says why it stopped.
    assert "failed 3 times in a row" in h.sender.of("reply")[-1]


async def test_a_success_between_failures_resets_the_streak(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(
        fake.tool_call("get_current_time", {"timezone": "Mars/A"}),
        fake.tool_call("get_current_time", {"timezone": "Mars/B"}),
        fake.tool_call("get_current_time", {"timezone": "UTC"}),
        fake.tool_call("get_current_time", {"timezone": "Mars/C"}),
        fake.tool_call("get_current_time", {"timezone": "Mars/D"}),
        fake.text("Only UTC exists."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("times?")
        run, trace, _ = await _last_run(h)
    assert run.status == "ok" and "stop_rule" not in trace
    assert h.sender.of("reply") == ["Only UTC exists."]


async def test_two_calls_of_unknown_tools_with_new_ids_stop_the_run(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # RFC-044's incident: a tool that is not there, called again and again with a new id each time.
    fake_llm.push(
        *(fake.tool_call("gmail_trash", {"id": n}) for n in range(61)),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("clean my inbox")
        run, trace, _ = await _last_run(h)
    assert _ran(trace) == ["gmail_trash", "gmail_trash"]
    assert len(fake_llm.requests) == 3
    assert trace["stop_rule"] == "unavailable_tools"
    assert "`gmail_trash`" in run.error and "not available" in h.sender.of("reply")[-1]


async def test_a_tool_of_a_group_not_loaded_counts_as_unavailable(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("read_file", {"path": "a.txt"}),
        fake.tool_call("sessions_list", {}),
        fake.text("I could not read it."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("read a.txt")
        _, trace, _ = await _last_run(h)
    assert trace["stop_rule"] == "unavailable_tools"
    assert h.sender.of("reply") == ["I could not read it."]


async def test_loading_the_group_after_one_not_loaded_error_is_the_normal_path_and_keeps_going(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("sessions_list", {}),
        fake.tool_call("load_tool_group", {"group_name": "sessions"}),
        fake.tool_call("sessions_list", {}),
        fake.text("One session."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("list sessions")
        run, trace, _ = await _last_run(h)
    assert run.status == "ok" and _ran(trace) == ["sessions_list", "load_tool_group", "sessions_list"]


async def test_thirty_successful_calls_with_different_arguments_run_to_the_answer(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    zones = sorted(z for z in available_timezones() if z.startswith("Europe/"))[:30]
    assert len(zones) == 30
    fake_llm.push(*(fake.tool_call("get_current_time", {"timezone": z}) for z in zones), fake.text("Done."))
    async with running_bridge(tmp_path, fake_llm, agent={"max_iterations": 40}) as h:
        await h.say("the time in every European capital")
        run, trace, _ = await _last_run(h)
    assert run.status == "ok" and len(_ran(trace)) == 30
    assert h.sender.of("reply") == ["Done."]


async def test_a_stop_in_the_middle_of_a_response_still_sends_a_result_for_every_call(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_calls(
            fake.tool_call("nope_one", {}),
            fake.tool_call("nope_two", {}),
            fake.tool_call("get_current_time", {}),
        ),
        fake.text("Sorry."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("go")
        _, trace, _ = await _last_run(h)
        session = await h.bridge.store.active_session("main")
        assert session is not None
        rows = await h.bridge.store.history(session.id, 100)
    assert _ran(trace) == ["nope_one", "nope_two"]
    final = fake_llm.requests[-1]
    assert "tools" not in final and _every_call_has_its_result(final)
    # The call that never ran is not in history either.
    assert [r.tool_name for r in rows if r.kind == "tool_call"] == ["nope_one", "nope_two"]


@pytest.mark.parametrize(
    ("loops", "ran"),
    [
        ({"max_failures_in_a_row": 5}, 5),
        ({"max_failures_in_a_row": 0}, 8),
    ],
)
async def test_the_failure_streak_threshold_is_a_config_key(
    tmp_path: Path, fake_llm: FakeOpenAI, loops: dict[str, Any], ran: int
) -> None:
    fake_llm.push(
        *(fake.tool_call("get_current_time", {"timezone": f"Mars/{n}"}) for n in range(8)),
        fake.text("No."),
    )
    async with running_bridge(tmp_path, fake_llm, agent={"loops": loops, "max_iterations": 8}) as h:
        await h.say("mars")
        _, trace, _ = await _last_run(h)
    assert len(_ran(trace)) == ran


async def test_the_unavailable_threshold_and_the_repeat_rule_can_be_relaxed(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("nope", {}),
        fake.tool_call("get_current_time", {}),
        fake.tool_call("nope", {}),
        fake.tool_call("get_current_time", {}),
        fake.text("Done."),
    )
    loops = {"max_unavailable_calls": 3, "stop_on_repeat": False}
    async with running_bridge(tmp_path, fake_llm, agent={"loops": loops}) as h:
        await h.say("go")
        run, trace, _ = await _last_run(h)
    assert run.status == "ok" and len(_ran(trace)) == 4


def test_a_bad_loop_threshold_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[agent.loops]\nmax_failures_in_a_row = -1\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert "agent.loops.max_failures_in_a_row" in str(caught.value)


async def test_a_last_answer_written_as_a_call_is_never_the_reply_the_last_result_is(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # What the 0.5B model did after a repeat: asked for an answer with no tools, it wrote the call.
    call = {"timezone": "Asia/Tokyo"}
    fake_llm.push(
        fake.tool_call("get_current_time", call),
        fake.tool_call("get_current_time", call),
        fake.text('```json\n{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}\n```'),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time in Tokyo?")
        [(run, _)] = await h.bridge.store.list_runs(session_key="main", limit=1)
    reply = h.sender.of("reply")[-1]
    # The answer is what the tool found, in plain words; why the run stopped is the run's, not the chat's.
    assert reply.startswith("It's ") and reply.endswith("in Tokyo (Asia/Tokyo).")
    assert "```" not in reply and "{" not in reply and "kept calling" not in reply
    assert run.status == "stopped" and "kept calling `get_current_time`" in (run.error or "")


async def test_a_result_with_no_words_of_its_own_is_answered_as_readable_lines_never_raw_json(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "sessions"}),
        fake.tool_call("sessions_list", {}),
        fake.tool_call("sessions_list", {}),
        fake.text('{"name": "sessions_list", "arguments": {}}'),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("which chats are there?")
    reply = h.sender.of("reply")[-1]
    assert reply.startswith("Here is what sessions_list found:\n- sessions 1.key: main")
    assert "{" not in reply and '"' not in reply


async def test_with_no_result_in_hand_the_reply_says_why_the_run_stopped(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    bad = {"timezone": "Mars/Olympus"}
    fake_llm.push(*(fake.tool_call("get_current_time", bad) for _ in range(3)), fake.text(""))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time on Mars?")
    assert h.sender.of("reply")[-1].startswith("⚠️")


async def test_a_last_answer_that_only_repeats_the_question_is_not_the_reply(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("get_current_time", {}),
        fake.tool_call("get_current_time", {}),
        fake.text("  What time is it?  "),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("what time is it?")
    # Not the question again: what the tool found.
    assert h.sender.of("reply")[-1].startswith("It's ")


async def test_the_last_request_repeats_this_turns_tool_results_before_asking_for_the_answer(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("get_current_time", {"timezone": "UTC"}),
        fake.tool_call("get_current_time", {"timezone": "UTC"}),
        fake.text("Noon."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
    last = str(fake_llm.requests[-1]["messages"][-1]["content"])
    assert last.startswith("What the tools returned:\n- get_current_time: ")
    assert last.endswith(FINAL_REQUEST) and '"timezone": "UTC"' in last
    assert h.sender.of("reply") == ["Noon."]


async def test_the_question_shape_folds_the_turns_calls_into_the_question_and_its_results(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.text("Earlier answer."),
        fake.tool_call("get_current_time", {"timezone": "Asia/Tokyo"}),
        fake.tool_call("get_current_time", {"timezone": "Asia/Tokyo"}),
        fake.text("It is 3 am in Tokyo."),
    )
    async with running_bridge(tmp_path, fake_llm, agent={"loops": {"last_request": "question"}}) as h:
        await h.say("hello")
        await h.say("What time is it in Tokyo?")
        _run, trace, _text = await _last_run(h)
        session = await h.bridge.store.active_session("main")
        assert session is not None
        kinds = [row.kind for row in await h.bridge.store.history(session.id, 100)]
    last = fake_llm.requests[-1]
    assert "tools" not in last
    # The earlier turn as it was; this turn's call and result never replayed as such: nothing to copy.
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert not any(m.get("tool_calls") for m in last["messages"])
    folded = str(last["messages"][-1]["content"])
    assert folded.startswith("What time is it in Tokyo?\n\nWhat the tools returned:\n- get_current_time: ")
    assert '"timezone": "Asia/Tokyo"' in folded and folded.endswith(FINAL_QUESTION)
    assert h.sender.of("reply")[-1] == "It is 3 am in Tokyo."
    assert trace["answered_from"] == "model" and trace["stop_rule"] == "repeated_call"
    # History keeps the turn as it went: its one call is stored, the fold is not.
    assert kinds.count("tool_call") == 1 and kinds.count("user") == 2


@pytest.mark.parametrize(
    ("last", "source"),
    [
        (fake.text("Noon in UTC."), "model"),
        (fake.text('```json\n{"name": "get_current_time", "arguments": {}}\n```'), "tool_result"),
    ],
)
async def test_the_trace_says_whose_words_a_cut_short_answer_is(
    tmp_path: Path, fake_llm: FakeOpenAI, last: Any, source: str
) -> None:
    call = fake.tool_call("get_current_time", {"timezone": "UTC"})
    fake_llm.push(call, call, last)
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
        _run, trace, text = await _last_run(h)
    assert trace["answered_from"] == source
    # `bridge trace` says so where the words are Bridge's.
    assert ("answered in Bridge's words" in format_trace(text)) is (source == "tool_result")


async def test_an_empty_answer_after_a_tool_succeeded_is_what_the_tool_did_in_plain_words(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # Qwen2.5-Coder-1.5B in text mode writes nothing once save_memory has succeeded.
    fake_llm.push(fake.tool_call("save_memory", {"content": "my locker number is 4711."}), fake.text(""))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("Remember this: my locker number is 4711.")
        run, trace, _text = await _last_run(h)
    reply = h.sender.of("reply")[-1]
    assert reply == "Saved to memory: my locker number is 4711."
    assert run.status == "ok" and trace["answered_from"] == "tool_result"


async def test_an_empty_answer_with_nothing_done_says_the_model_gave_none(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("   "))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("hello?")
        _run, trace, _text = await _last_run(h)
    assert h.sender.of("reply")[-1] == "(The model returned an empty answer.)"
    assert "answered_from" not in trace


async def test_a_run_stopped_by_failures_asks_its_answer_from_what_succeeded_not_the_failures(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    bad = fake.tool_call("get_current_time", {"timezone": "Mars/Olympus"})
    fake_llm.push(fake.tool_call("get_current_time", {"timezone": "UTC"}), bad, bad, bad, fake.text("Noon."))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
        _run, trace, _text = await _last_run(h)
    assert trace["stop_rule"] == "failure_streak"
    last = str(fake_llm.requests[-1]["messages"][-1]["content"])
    assert '"timezone": "UTC"' in last and "Error [" not in last


async def test_a_group_loaded_is_never_the_answer_in_bridges_words(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    load = fake.tool_call("load_tool_group", {"group_name": "files"})
    fake_llm.push(
        load, fake.tool_call("write_file", {"path": "a.txt", "content": "hi"}), load, load, fake.text("")
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("write hi to a.txt")
        _run, trace, _text = await _last_run(h)
    # The newest result is the group loaded again; what the run did is the file written.
    assert h.sender.of("reply")[-1] == "Wrote 2 bytes to 'a.txt'."
    assert trace["answered_from"] == "tool_result"


async def test_with_nothing_in_hand_the_trace_says_the_rule_answered(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    bad = {"timezone": "Mars/Olympus"}
    fake_llm.push(*(fake.tool_call("get_current_time", bad) for _ in range(3)), fake.text(""))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time on Mars?")
        _run, trace, _text = await _last_run(h)
    assert trace["answered_from"] == "rule" and trace["stop_rule"] == "failure_streak"


async def test_a_group_called_like_a_tool_is_told_how_to_load_it(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("sessions", {}),
        fake.tool_call("load_tool_group", {"group_name": "sessions"}),
        fake.text("Loaded."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("sessions please")
    result = [m for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "'sessions' is a tool group, not a tool" in result and "group_name='sessions'" in result
    assert "sessions_list" in result and h.sender.of("reply") == ["Loaded."]


async def test_a_call_that_passes_an_earlier_result_back_as_its_arguments_counts_as_a_repeat(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # What the 0.5B model did in text mode: each result became the next call's arguments, every call
    # different and a success, until max_iterations.
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "pdf"}),
        fake.tool_call("pdf_info", {"path": "r.pdf"}),
        fake.tool_call("pdf_info", {"path": "r.pdf", "pages": 3}),
        fake.text('{"name": "pdf_info", "arguments": {"path": "r.pdf", "pages": 3}}'),
    )
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),)) as h:
        await h.say("how many pages has r.pdf?")
        rows = await h.bridge.store.history((await h.bridge.sessions.active_for_key("main")).id, 50)
        [(run, _)] = await h.bridge.store.list_runs(session_key="main", limit=1)
    assert [r.tool_name for r in rows if r.kind == "tool_call"] == ["load_tool_group", "pdf_info"]
    assert run.status == "stopped" and "a result it already had" in (run.error or "")
    assert h.sender.of("reply")[-1] == "Here is what pdf_info found:\n- path: r.pdf\n- pages: 3"


async def test_one_argument_that_happens_to_match_a_result_is_not_an_echo(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "pdf"}),
        fake.tool_call("pdf_info", {"path": "r.pdf"}),
        fake.tool_call("pdf_extract_text", {"path": "r.pdf"}),
        fake.text("Three pages."),
    )
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),)) as h:
        await h.say("read r.pdf")
    assert h.sender.of("reply")[-1] == "Three pages."
