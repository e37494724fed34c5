"""The real-model evaluation's engine, run on the scripted fake model: it plays, counts and scores."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench import real_model, stream_latency
from bench.__main__ import BENCHMARKS
from bench.real_model import SCENARIOS, EvalConfig, evaluate, hour_pattern, is_call_shaped, run_scenario
from bench.real_model.scenarios import CHATS, NEWCOMER
from bridge.agent.loops import FINAL_QUESTION, FINAL_REQUEST
from devkit.fakes.loopback import closed_port
from devkit.fakes.openai_server import FakeOpenAI, Reply, text, tool_call

ROOT = Path(__file__).parent.parent
Step = Reply | Callable[[list[str]], Reply]


def turn(scenario: str, number: int) -> str:
    return SCENARIOS[scenario][number].text


def load(group: str) -> Reply:
    return tool_call("load_tool_group", {"group_name": group})


def quoting(template: str) -> Callable[[list[str]], Reply]:
    """An answer that quotes the turn's tool results, as a model that read them would."""
    return lambda results: text(template.format(" and ".join(results)))


def session_count(results: list[str]) -> Reply:
    # The turn's last result: a reload of the group comes before it.
    listing = results[-1]
    return text(f"You have {json.loads(listing)['count']} session.")


# What the fake model does, turn by turn: one step per request, chosen by the tool results so far.
# It makes each mistake the evaluation counts once: a reload, a call of a tool whose group is not
# loaded, an unknown tool, and a repeated call that the loop rules stop.
PLAYS: dict[str, list[Step]] = {
    turn("groups", 0): [load("sessions"), tool_call("sessions_list", {}), text("One session: main.")],
    turn("groups", 1): [load("sessions"), tool_call("sessions_list", {}), session_count],
    turn("groups", 2): [tool_call("sessions_list", {}), tool_call("sessions_list", {})],
    turn("files", 0): [
        tool_call("write_file", {"path": "notes.txt", "content": "the launch code is 4711"}),
        load("files"),
        tool_call("write_file", {"path": "notes.txt", "content": "the launch code is 4711"}),
        text("Saved."),
    ],
    turn("files", 1): [tool_call("read_file", {"path": "notes.txt"}), quoting("It says: {}")],
    turn("time", 0): [
        tool_call("get_current_time", {"timezone": "Asia/Tokyo"}),
        tool_call("get_current_time", {"timezone": "America/New_York"}),
        quoting("Now: {}"),
    ],
    turn("time", 1): [tool_call("get_current_time", {"timezone": "Europe/London"}), quoting("{}")],
    turn("mixed", 0): [
        load("files"),
        tool_call("write_file", {"path": "todo.txt", "content": "buy milk"}),
        text("Done."),
    ],
    turn("mixed", 1): [
        tool_call("current_time", {}),
        tool_call("get_current_time", {"timezone": "UTC"}),
        quoting("{}"),
    ],
    turn("mixed", 2): [tool_call("read_file", {"path": "todo.txt"}), quoting("{}")],
    NEWCOMER["first-question"][0].text: [
        tool_call("get_current_time", {"timezone": "Asia/Tokyo"}),
        tool_call("get_current_time", {"timezone": "Asia/Tokyo"}),
    ],
    NEWCOMER["remember"][0].text: [tool_call("save_memory", {"content": "locker 4711"}), text("Saved.")],
    NEWCOMER["remember"][2].text: [text("Your locker number is 4711.")],
    NEWCOMER["write-read"][0].text: [
        load("files"),
        tool_call("write_file", {"path": "shopping.txt", "content": "eggs, flour, sugar"}),
        text("Written."),
    ],
    NEWCOMER["write-read"][1].text: [
        tool_call("read_file", {"path": "shopping.txt"}),
        quoting("It says: {}"),
    ],
    NEWCOMER["no-tool"][0].text: [text("Paris.")],
}


class Player:
    """The fake model's script: the step of the newest user message that its tool results have reached."""

    def __init__(self, changed: Mapping[str, Sequence[Step]] | None = None) -> None:
        # Keyed by the user message's text, as PLAYS is.
        self.plays: dict[str, Sequence[Step]] = {**PLAYS, **(changed or {})}

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = max(i for i, m in enumerate(messages) if m["role"] == "user")
        asked = messages[last]["content"]
        if asked.endswith((FINAL_REQUEST, FINAL_QUESTION)):
            # A run's last request, in either shape: an answer from the results it repeats.
            found = asked.partition("What the tools returned:")[2]
            return text(f"From the results: {found[:300]}" if found else "Your session is main.")
        if messages[last]["content"] in stream_latency.PROMPTS:
            # The streaming-latency prompts, which are not chats.
            return text("A few sentences, as asked.")
        results = [m["content"] for m in messages[last:] if m["role"] == "tool"]
        step = self.plays[messages[last]["content"]][len(results)]
        return step(results) if callable(step) else step


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(Player()) as fake:
        yield fake


def config(fake: FakeOpenAI) -> EvalConfig:
    return EvalConfig(fake.base_url, "fake", "native", turn_timeout_s=60)


def figures(result: dict[str, Any]) -> dict[str, Any]:
    keys = ("model_calls", "reloads", "not_loaded", "unknown_tool", "loop_stops", "facts_found")
    return {key: result[key] for key in (*keys, "facts_expected")}


async def test_a_reload_and_a_repeated_call_are_counted_and_the_facts_checked(model: FakeOpenAI) -> None:
    result = await run_scenario("groups", SCENARIOS["groups"], config(model))
    # 3 requests a turn; the third turn's repeat is refused and one last request made without tools.
    assert figures(result) == {
        "model_calls": 9,
        "reloads": 1,
        "not_loaded": 0,
        "unknown_tool": 0,
        "loop_stops": 1,
        "facts_found": 3,
        "facts_expected": 3,
    }
    assert result["stop_rules"] == {"repeated_call": 1}
    assert result["turns"][0]["reply"] == "One session: main."


async def test_a_file_written_in_one_turn_is_read_in_the_next(model: FakeOpenAI) -> None:
    result = await run_scenario("files", SCENARIOS["files"], config(model))
    assert figures(result) == {
        "model_calls": 6,
        "reloads": 0,
        "not_loaded": 1,
        "unknown_tool": 0,
        "loop_stops": 0,
        "facts_found": 2,
        "facts_expected": 2,
    }
    assert result["tool_calls"][:2] == ["write_file:error", "load_tool_group:success"]


async def test_an_answer_missing_a_fact_is_scored_as_missing() -> None:
    async with FakeOpenAI(Player({turn("time", 1): [text("I cannot tell.")]})) as fake:
        result = await run_scenario("time", SCENARIOS["time"], config(fake))
    assert (result["facts_found"], result["facts_expected"]) == (2, 3)
    assert [fact["found"] for t in result["turns"] for fact in t["facts"]] == [True, True, False]


async def test_a_reply_that_writes_out_a_call_scores_no_fact_even_when_it_holds_one() -> None:
    london = tool_call("get_current_time", {"timezone": "Europe/London"})
    async with FakeOpenAI(Player({turn("time", 1): [london, quoting("get_current_time() says {}")]})) as fake:
        result = await run_scenario("time", SCENARIOS["time"], config(fake))
    assert result["turns"][1]["call_shaped"] and result["call_replies"] == 1
    assert (result["facts_found"], result["facts_expected"]) == (2, 3)


@pytest.mark.parametrize(
    ("reply", "shaped"),
    [
        ('```json\n{"name": "read_file", "arguments": {}}\n```', True),
        ('{"tool_name": "files", "arguments": {}}', True),
        ('search_history(query: "main", limit: 10)', True),
        ("You have one session: main.", False),
        ("It is 14:05 in Tokyo (get the time any time).", False),
    ],
)
def test_call_shaped_replies_are_told_from_answers(reply: str, shaped: bool) -> None:
    assert is_call_shaped(reply, {"read_file", "search_history", "get_current_time"}) is shaped


async def test_every_scenario_runs_and_the_totals_add_up(model: FakeOpenAI) -> None:
    data = await evaluate(model.base_url, "fake", ["native"], list(CHATS), manage_server=False)
    [native] = data["runs"]
    assert (native["model"], native["mode"], native["last_request"]) == ("fake", "native", "history")
    assert [r["scenario"] for r in native["scenarios"]] == list(CHATS)
    total = native["totals"]
    assert (total["facts_found"], total["facts_expected"]) == (11, 11)
    assert (total["reloads"], total["not_loaded"], total["unknown_tool"], total["loop_stops"]) == (1, 1, 1, 1)
    assert total["call_replies"] == 0
    assert total["model_calls"] == sum(r["model_calls"] for r in native["scenarios"]) == 9 + 6 + 5 + 8


async def test_the_newcomer_set_is_scored_by_question_in_each_last_request_shape(model: FakeOpenAI) -> None:
    data = await evaluate(
        model.base_url,
        "fake",
        ["native"],
        list(NEWCOMER),
        shapes=["history", "question"],
        manage_server=False,
    )
    history, question = data["runs"]
    assert (history["last_request"], question["last_request"]) == ("history", "question")
    labels = ["time in Tokyo", "fact saved", "recalled after /clear", "file written", "file read back"]
    for run in (history, question):
        rows = {row["question"]: row for row in run["questions"]}
        assert list(rows) == [*labels, "no tool needed"]
        assert all(row["answered_right"] == row["repeats"] == 1 for row in rows.values())
        # The repeated time call is stopped by the rule, and the last request gets the answer.
        assert rows["time in Tokyo"]["rule_stopped"] == 1 and rows["time in Tokyo"]["model_calls_max"] == 3
        assert rows["no tool needed"]["model_calls_max"] == 1
    # This fake answers the folded question itself, and the history shape from its instruction; the
    # "/clear" between saving and recalling is a command, which starts no run.
    remember = next(r for r in question["scenarios"] if r["scenario"] == "remember")
    assert [t["model_calls"] for t in remember["turns"]] == [2, 0, 1]
    assert [t["answered_from"] for t in remember["turns"]] == ["model", None, "model"]


async def test_a_server_that_does_not_answer_is_named() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(SystemExit, match="no model server answers"):
        await evaluate(url, "fake", ["native"], ["time"], manage_server=False)


@pytest.mark.parametrize(
    ("written", "hour", "found"),
    [
        ("It is 14:05 in Tokyo.", 14, True),
        ("2026-11-23T14:05:33+09:00", 14, True),
        ("It is 2:05 PM.", 14, True),
        ("It is 2 pm.", 14, True),
        ("It is 13:59.", 14, True),  # a turn may straddle the hour
        ("It is 2:05 AM.", 14, False),
        ("Seconds :14:05 only", 14, False),
        ("It is 09:30.", 14, False),
    ],
)
def test_a_clock_time_is_found_in_either_form(written: str, hour: int, found: bool) -> None:
    at = datetime(2026, 11, 23, hour, 5, tzinfo=UTC)
    assert (re.search(hour_pattern("UTC", at), written, re.IGNORECASE) is not None) is found


def test_real_model_is_a_subcommand_not_part_of_the_default_run() -> None:
    assert "real-model" not in BENCHMARKS and "real_model" not in BENCHMARKS
    assert real_model.DEFAULT_BASE_URL == "http://127.0.0.1:18080/v1"


async def test_python_m_bench_real_model_writes_its_json(model: FakeOpenAI, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "bench", "real-model", "--base-url", model.base_url]
    command += ["--model", "fake", "--tool-mode", "native", "--scenarios", "time"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "BRIDGE_BENCH_RESULTS": str(tmp_path)}
    process = await asyncio.create_subprocess_exec(
        *command, cwd=ROOT, env={**env, "NO_PROXY": "127.0.0.1"}, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, out.decode()[-2000:]
    data = json.loads((tmp_path / "real_model.json").read_text())
    assert data["benchmark"] == "real_model" and data["machine"]["cpus"]
    assert data["runs"][0]["totals"]["facts_found"] == 3
    assert "Real model fake, native tool calls" in out.decode()
    assert data["streaming"]["streamed"]["samples"] == 3


async def test_the_streaming_latency_is_measured_streamed_and_whole(fake_llm: FakeOpenAI) -> None:
    from devkit.fakes import openai_server as fake

    reply = fake.paced(fake.text("A reply long enough to arrive in several pieces."), 0.02)
    fake_llm.push(*[reply] * (2 * len(stream_latency.PROMPTS)))
    result = await stream_latency.measure(fake_llm.base_url, "fake")
    streamed, whole = result["streamed"], result["whole"]
    assert streamed["samples"] == whole["samples"] == len(stream_latency.PROMPTS)
    # Paced chunks: the first word of a stream shows well before its end; unstreamed, only at the end.
    assert streamed["first_visible_s"] < streamed["full_reply_s"]
    assert whole["first_visible_s"] == whole["full_reply_s"]
    assert [r.get("stream") for r in fake_llm.requests[:2]] == [True, None]
