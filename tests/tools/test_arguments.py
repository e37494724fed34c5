"""Tool arguments as types: one validation for every call, lax readings, schemas made from the models."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from bridge.app.registry import build_registry
from bridge.config import Settings
from bridge.errors import ManifestError
from bridge.tools.arguments import arguments_schema, check_parameters, validate_arguments
from bridge.tools.base import Tool, ToolContext, ToolGroup, ToolResult
from bridge.tools.manifest import load_manifest
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.harness import running_bridge
from tests.tools.conftest import MakeContext, builtin


def builtin_tools() -> list[Tool]:
    registry = build_registry(Settings())
    return [*registry.core_tools(), *(t for g in registry.groups() for t in g.tools)]


def checked(name: str, args: dict[str, Any]) -> Any:
    """The validated arguments of a built-in tool; fails the test if they were refused."""
    result = validate_arguments(builtin(name), args)
    assert isinstance(result, BaseModel), result
    return result


def refusal(tool: Tool, args: dict[str, Any]) -> str:
    """The content of the invalid_arguments result for a call that must be refused."""
    result = validate_arguments(tool, args)
    assert isinstance(result, ToolResult), result
    assert result.code == "invalid_arguments" and not result.ok
    assert result.content.startswith(f"Error [invalid_arguments]: Invalid arguments for {tool.name}: ")
    return result.content


# ------------------------------------------------------------------------- every built-in refuses

# One bad call per built-in tool, and what the answer must say about the field.
BAD_CALLS: dict[str, tuple[dict[str, Any], str]] = {
    "load_tool_group": ({}, "'group_name' is required"),
    "get_current_time": ({"timezone": 42}, "'timezone' must be a string (got 42)"),
    "search_history": ({"query": ["cats"]}, "'query' must be a string (got [\"cats\"])"),
    "save_memory": ({"content": "   "}, "'content' must not be empty"),
    "read_file": ({"path": "a.txt", "offset": "first"}, "'offset' must be an integer ≥ 0 (got \"first\")"),
    "write_file": ({"path": "a.txt"}, "'content' is required"),
    "list_files": ({"recursive": "maybe"}, "'recursive' must be true or false (got \"maybe\")"),
    "webfetch": (
        {"url": "https://example.com", "max_chars": 0},
        "'max_chars' must be an integer ≥ 1 (got 0)",
    ),
    "sessions_list": (
        {"kinds": "cron"},
        "'kinds' must be a list of: main, group, cron, hook, node, agent, other (got \"cron\")",
    ),
    "sessions_history": (
        {"session_key": "main", "include_tools": "maybe"},
        "'include_tools' must be true or false",
    ),
    "sessions_send": ({"session_key": "main", "timeout_seconds": -1}, "'message' is required"),
    "schedule_task": ({"prompt": "stretch"}, "'when' is required"),
    "list_tasks": ({"include_ended": "maybe"}, "'include_ended' must be true or false"),
    "cancel_task": ({"task_id": "  "}, "'task_id' must not be empty"),
    "send_file": ({"caption": "here"}, "'path' is required"),
    "spawn_agent": ({"task": "look it up", "wait": "later"}, "'wait' must be true or false (got \"later\")"),
}


def test_every_built_in_tool_has_a_bad_call_case() -> None:
    assert {t.name for t in builtin_tools()} == set(BAD_CALLS)


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
async def test_a_built_in_tool_refuses_a_bad_call_with_one_result_naming_the_field(
    name: str, make_ctx: MakeContext
) -> None:
    args, says = BAD_CALLS[name]
    assert says in refusal(builtin(name), args)
    # Called as the model calls it: that one result, and the tool never ran (the context has no
    # store or registry, so a tool that ran would have crashed).
    result = await builtin(name)(args, make_ctx())
    assert result.code == "invalid_arguments" and says in result.content


def test_every_problem_is_named_in_one_short_answer() -> None:
    content = refusal(builtin("read_file"), {"limit": "abc"})
    assert content == (
        "Error [invalid_arguments]: Invalid arguments for read_file: "
        "'path' is required; 'limit' must be an integer ≥ 1 (got \"abc\")."
    )
    three = refusal(builtin("sessions_send"), {"session_key": " ", "timeout_seconds": True})
    assert three.endswith(
        "'session_key' must not be empty (got \" \"); 'message' is required; "
        "'timeout_seconds' must be a number ≥ 0 (got true)."
    )


def test_a_bad_list_item_is_reported_once_with_its_position() -> None:
    content = refusal(builtin("sessions_list"), {"kinds": ["martian", "main", 7]})
    assert content.endswith(
        "'kinds[0]' must be one of: main, group, cron, hook, node, agent, other (got \"martian\")."
    )


def test_a_long_value_is_shown_cut_short() -> None:
    content = refusal(builtin("read_file"), {"path": "a.txt", "limit": "x" * 500})
    assert "x" * 30 in content and "x" * 100 not in content and "…" in content


def test_a_nul_byte_in_a_path_is_refused() -> None:
    assert "'path' must not contain a NUL byte" in refusal(builtin("read_file"), {"path": "a\x00b"})


# ---------------------------------------------------------------------------------- lax readings


def test_numbers_sent_as_strings_are_read_as_numbers() -> None:
    args = checked("read_file", {"path": "a.txt", "offset": "2", "limit": " 3 "})
    assert (args.offset, args.limit) == (2, 3)
    assert checked("webfetch", {"url": "https://example.com", "max_chars": "500"}).max_chars == 500
    assert (
        checked(
            "sessions_send", {"session_key": "x", "message": "hi", "timeout_seconds": "2.5"}
        ).timeout_seconds
        == 2.5
    )


@pytest.mark.parametrize(
    ("sent", "read"), [("true", True), ("FALSE", False), ("yes", True), (1, True), (False, False)]
)
def test_yes_no_values_are_read_as_booleans(sent: Any, read: bool) -> None:
    assert checked("write_file", {"path": "a", "content": "x", "append": sent}).append is read
    assert checked("list_files", {"recursive": sent}).recursive is read


def test_a_boolean_is_not_a_number() -> None:
    assert "'limit' must be an integer ≥ 1 (got true)" in refusal(
        builtin("read_file"), {"path": "a", "limit": True}
    )


def test_null_means_left_out() -> None:
    args = checked("read_file", {"path": "a.txt", "offset": None, "limit": None})
    assert (args.offset, args.limit) == (0, None)
    assert checked("list_files", {"path": None}).path == "."
    assert checked("search_history", {"query": "x", "limit": None}).limit == 10
    assert refusal(builtin("read_file"), {"path": None}).endswith("'path' is required.")


def test_text_is_stripped_but_paths_are_kept_as_given() -> None:
    assert checked("search_history", {"query": "  banana "}).query == "banana"
    assert checked("read_file", {"path": " notes.txt"}).path == " notes.txt"


def test_unknown_keys_are_an_error_that_names_them_and_what_the_tool_takes() -> None:
    assert refusal(builtin("get_current_time"), {"zone": "UTC"}) == (
        "Error [invalid_arguments]: Invalid arguments for get_current_time: unknown argument 'zone' "
        "(it takes: timezone)."
    )
    # A result passed back as the next call's arguments, as the 0.5B model in text mode did.
    echoed = {"iso": "2026-11-27T16:00:00+00:00", "timezone": "UTC", "weekday": "Friday"}
    assert "unknown arguments 'iso', 'weekday' (it takes: timezone)" in refusal(
        builtin("get_current_time"), echoed
    )


# --------------------------------------------------------------------------------------- clamping


@pytest.mark.parametrize(
    ("sent", "read"), [(3, 3), ("7", 7), (3.9, 3), (0, 1), (-5, 1), (1000, 50), ("many", 10), ([3], 10)]
)
def test_counts_are_clamped_and_an_unreadable_count_is_the_default(sent: Any, read: int) -> None:
    assert checked("search_history", {"query": "x", "limit": sent}).limit == read


def test_each_count_has_its_own_range() -> None:
    listing = checked("sessions_list", {"limit": 10_000, "message_limit": -3, "active_minutes": "-5"})
    assert (listing.limit, listing.message_limit, listing.active_minutes) == (200, 0, 0)
    assert checked("sessions_list", {"message_limit": 99}).message_limit == 20
    assert checked("sessions_history", {"session_key": "main", "limit": 0}).limit == 1


# --------------------------------------------------------------------------------------- schemas


def keys(node: Any) -> Iterator[str]:
    """Every schema keyword in node; the names under "properties" are fields, not keywords."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                for spec in value.values():
                    yield from keys(spec)
            else:
                yield key
                yield from keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from keys(item)


@pytest.mark.parametrize("tool", builtin_tools(), ids=lambda t: t.name)
def test_a_built_in_schema_is_made_from_its_model_without_pydantic_noise(tool: Tool) -> None:
    assert tool.arguments is not None
    assert tool.parameters == arguments_schema(tool.arguments)
    assert tool.schema()["function"]["parameters"] is tool.parameters
    assert not {"title", "default", "$defs", "$ref", "anyOf"} & set(keys(tool.parameters))
    assert tool.parameters["type"] == "object"
    # Every field tells the model what it is for, and the schema is one a validator accepts.
    assert all(spec.get("description") for spec in tool.parameters["properties"].values())
    check_parameters(tool.parameters)


def test_a_schema_keeps_names_descriptions_required_and_bounds() -> None:
    assert builtin("read_file").parameters == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace, e.g. notes/todo.md"},
            "offset": {"type": "integer", "minimum": 0, "description": "First line to return, 0-based."},
            "limit": {"type": "integer", "minimum": 1, "description": "How many lines to return."},
        },
        "required": ["path"],
    }
    kinds = builtin("sessions_list").parameters["properties"]["kinds"]
    assert kinds == {
        "type": "array",
        "items": {"type": "string", "enum": ["main", "group", "cron", "hook", "node", "agent", "other"]},
        "description": "Only sessions of these kinds",
    }


# ------------------------------------------------------------------------------- manifest tools

SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "count": {"type": "integer", "minimum": 1},
        "mode": {"enum": ["fast", "slow"]},
        "loud": {"type": "boolean"},
    },
    "required": ["text"],
}


async def echo(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """A manifest handler that hands back what it was given."""
    return {"got": args}


def write_manifest(folder: Path, parameters: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "echo.json"
    entry = {"name": "echo", "description": "Echo", "handler": f"{__name__}:echo", "parameters": parameters}
    path.write_text(json.dumps([entry]), encoding="utf-8")
    return path


@pytest.fixture
def echo_tool(tmp_path: Path) -> Tool:
    [tool] = load_manifest(write_manifest(tmp_path / "manifests", SCHEMA)).tools
    return tool


def test_a_manifest_tool_is_refused_through_the_same_validation(echo_tool: Tool) -> None:
    content = refusal(echo_tool, {"count": 0, "mode": "turbo", "loud": "maybe"})
    assert "'text' is required" in content
    assert "'count' must be an integer ≥ 1 (got 0)" in content
    assert "'mode' must be one of: fast, slow (got \"turbo\")" in content
    assert "'loud' must be true or false (got \"maybe\")" in content
    assert content.count(";") == 3


async def test_a_manifest_tool_gets_the_same_lax_readings(echo_tool: Tool, make_ctx: MakeContext) -> None:
    args = {"text": "hi", "count": "3", "loud": "true", "mode": None, "extra": "kept"}
    assert validate_arguments(echo_tool, args) == {"text": "hi", "count": 3, "loud": True, "extra": "kept"}
    result = await echo_tool(args, make_ctx())
    assert json.loads(result.content) == {"got": {"text": "hi", "count": 3, "loud": True, "extra": "kept"}}


def test_a_manifest_value_no_reading_fixes_is_refused_as_sent(echo_tool: Tool) -> None:
    assert "'count' must be an integer ≥ 1 (got \"three\")" in refusal(
        echo_tool, {"text": "x", "count": "three"}
    )
    # A string field keeps a numeric string: nothing is read into a type the schema does not ask for.
    assert validate_arguments(echo_tool, {"text": "5"}) == {"text": "5"}


def test_nested_manifest_problems_name_their_path(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {
            "filter": {"type": "object", "properties": {"from": {"type": "string"}}, "required": ["from"]}
        },
    }
    [tool] = load_manifest(write_manifest(tmp_path / "m", schema)).tools
    assert refusal(tool, {"filter": {}}).endswith("'filter.from' is required.")
    assert refusal(tool, {"filter": {"from": 3}}).endswith("'filter.from' must be a string (got 3).")


@pytest.mark.parametrize(
    ("parameters", "reason"),
    [
        (
            {"type": "object", "properties": {"n": {"type": "integr"}}},
            "is not valid under any of the given schemas",
        ),
        ({"type": "object", "properties": {"n": {"minimum": "one"}}}, "is not of type 'number'"),
        ({"type": "object", "required": "n"}, "is not of type 'array'"),
        ({"type": "object", "properties": {"n": {"$ref": "#/$defs/missing"}}}, "cannot be resolved"),
    ],
)
def test_an_invalid_manifest_schema_is_refused_at_load(tmp_path: Path, parameters: Any, reason: str) -> None:
    path = write_manifest(tmp_path / "m", parameters)
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    message = str(info.value)
    assert str(path) in message and "entry 0" in message
    assert "'parameters' is not a valid JSON schema" in message and reason in message


def test_a_manifest_schema_with_local_refs_loads_and_validates(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "$defs": {"size": {"type": "integer", "maximum": 9}},
        "properties": {"n": {"$ref": "#/$defs/size"}},
    }
    [tool] = load_manifest(write_manifest(tmp_path / "m", schema)).tools
    assert validate_arguments(tool, {"n": "4"}) == {"n": 4}
    assert "'n' must be an integer ≤ 9 (got 10)" in refusal(tool, {"n": 10})


# ------------------------------------------------------------------------------------- the runner


def tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


async def test_the_runner_answers_invalid_arguments_as_a_tool_result_and_the_run_goes_on(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(
        fake.tool_call("search_history", {"limit": 5}, call_id="bad"),
        fake.tool_call("search_history", {"query": "banana", "limit": "3"}, call_id="good"),
        fake.text("No bananas."),
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("did I mention bananas?")
        session = await h.bridge.store.active_session("main")
        assert session is not None
        rows = await h.bridge.store.history(session.id, 100)
    assert tool_results(fake_llm.requests[1]) == [
        "Error [invalid_arguments]: Invalid arguments for search_history: 'query' is required."
    ]
    assert json.loads(tool_results(fake_llm.requests[2])[-1])["query"] == "banana"
    assert h.sender.of("reply") == ["No bananas."]
    assert [r.tool_status for r in rows if r.kind == "tool_call"] == ["error", "success"]


async def test_the_runner_validates_a_schema_only_tool_before_its_handler_runs(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    received: list[dict[str, Any]] = []

    async def handler(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        received.append(args)
        return ToolResult.success("ok")

    group = ToolGroup("echoes", "Echo tools", (Tool("echo_do", "Echo", SCHEMA, handler),))
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "echoes"}),
        fake.tool_call("echo_do", {"text": "hi", "count": "two"}),
        fake.tool_call("echo_do", {"text": "hi", "count": "2"}),
        fake.text("Done."),
    )
    async with running_bridge(tmp_path, fake_llm, extra_groups=(group,)) as h:
        await h.say("echo")
    assert tool_results(fake_llm.requests[2])[-1] == (
        "Error [invalid_arguments]: Invalid arguments for echo_do: "
        "'count' must be an integer ≥ 1 (got \"two\")."
    )
    assert received == [{"text": "hi", "count": 2}]
    assert h.sender.of("reply") == ["Done."]
