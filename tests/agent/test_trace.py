"""Run traces: model requests, raw and parsed tool calls, results, timings and usage, secrets redacted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bridge.agent.trace import expand_trace, format_trace
from bridge.app import Bridge
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import Harness, RecordingSender, make_settings, running_bridge

SECRET = "sk-trace-secret-998877"


async def only_trace(h: Any) -> dict[str, Any]:
    [(run, _key)] = await h.bridge.store.list_runs(session_key="main", limit=5)
    text = await h.bridge.store.get_trace(run.id)
    assert text is not None
    return expand_trace(json.loads(text))


async def test_a_trace_records_requests_calls_results_usage_and_timings(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("get_current_time", {"timezone": "UTC"}, prompt_tokens=30, completion_tokens=7),
        fake.text("It is noon.", prompt_tokens=40, completion_tokens=4),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("what time is it?")
        trace = await only_trace(h)
    assert trace["session_key"] == "main" and trace["channel"] == "test" and trace["status"] == "ok"
    assert len(trace["input_hash"]) == 64
    assert trace["usage"] == {"prompt_tokens": 70, "completion_tokens": 11}
    model, tool, final = trace["steps"]
    assert model["type"] == "model" and model["request"] == fake_llm.requests[0]
    assert model["tool_calls"][0]["name"] == "get_current_time"
    assert tool["type"] == "tool" and tool["raw_arguments"] == '{"timezone": "UTC"}'
    assert tool["parsed_arguments"] == {"timezone": "UTC"} and tool["status"] == "success"
    assert "UTC" in tool["result"]
    assert final["content"] == "It is noon." and final["request"] == fake_llm.requests[1]
    assert all(step["ms"] >= 0 for step in trace["steps"])
    assert trace["duration_ms"] >= 0
    printed = format_trace(json.dumps(trace))
    assert "tool get_current_time: success" in printed and "text: It is noon." in printed


async def test_a_later_request_stores_only_what_it_adds_to_the_one_before(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.tool_call("get_current_time", {}), fake.text("noon"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
        [(run, _key)] = await h.bridge.store.list_runs(session_key="main", limit=5)
        stored = json.loads(await h.bridge.store.get_trace(run.id) or "")
    first, second = (step["request"] for step in stored["steps"] if step["type"] == "model")
    assert "messages_from_previous" not in first and len(first["messages"]) == 2
    # The system prompt and the question are shared; only the call and its result are new.
    assert second["messages_from_previous"] == 2
    assert [m["role"] for m in second["messages"]] == ["assistant", "tool"]
    assert expand_trace(stored)["steps"][2]["request"] == fake_llm.requests[1]


async def test_a_trace_keeps_malformed_arguments_raw_and_records_model_errors(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    broken = fake.tool_call("get_current_time", {})
    assert isinstance(broken.body, dict)
    broken.body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{not json"
    fake_llm.push(broken, fake.http_error(400, "context too long"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("hi")
        trace = await only_trace(h)
    tool = trace["steps"][1]
    assert tool["raw_arguments"] == "{not json" and tool["parsed_arguments"] is None
    assert tool["code"] == "invalid_arguments"
    assert "context too long" in trace["steps"][2]["error"]
    assert trace["status"] == "error"


async def test_secrets_never_reach_a_trace(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text(f"you said {SECRET}"))
    settings = make_settings(tmp_path, fake_llm.base_url, llm={"api_key": SECRET})
    async with Bridge(settings) as bridge:
        bridge.add_sender(RecordingSender())
        h = Harness(bridge, RecordingSender(), fake_llm)
        await h.say(f"my key is {SECRET}")
        [(run, _)] = await bridge.store.list_runs(session_key=None, limit=1)
        text = await bridge.store.get_trace(run.id)
    assert text is not None and SECRET not in text
    assert "<redacted>" in text


async def test_old_traces_are_pruned_and_run_rows_stay(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(*(fake.text(f"answer {i}") for i in range(4)))
    async with running_bridge(tmp_path, fake_llm) as h:
        for i in range(4):
            await h.say(f"question {i}")
        assert await h.bridge.store.prune_traces(2) == 2
        runs = await h.bridge.store.list_runs(session_key="main", limit=10)
        traces = [await h.bridge.store.get_trace(run.id) for run, _ in runs]
    assert len(runs) == 4
    assert [t is not None for t in traces] == [True, True, False, False]


async def test_no_traces_are_kept_when_keep_traces_is_zero(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("hi"))
    async with running_bridge(tmp_path, fake_llm, runs={"keep_traces": 0}) as h:
        await h.say("hello")
        [(run, _)] = await h.bridge.store.list_runs(session_key="main", limit=1)
        assert await h.bridge.store.get_trace(run.id) is None
        assert run.status == "ok"
