"""How an MCP server's tools are named and described to the model: valid function names, prefixed
only when taken, schemas without generated titles."""

from __future__ import annotations

import mcp.types as mt

from bridge.mcp.group import _parameters, exposed_name


def test_a_free_name_is_kept_and_a_taken_one_is_prefixed_with_the_server() -> None:
    assert exposed_name("fs", "read_text", lambda n: False) == "read_text"
    assert exposed_name("fs", "read_file", lambda n: n == "read_file") == "fs__read_file"


def test_characters_a_function_name_cannot_hold_become_underscores_within_64() -> None:
    assert exposed_name("gh", "repos.list/all", lambda n: False) == "repos_list_all"
    long = exposed_name("server", "x" * 80, lambda n: True)
    assert long.startswith("server__x") and len(long) == 64


def test_generated_titles_are_dropped_but_a_property_named_title_stays() -> None:
    spec = mt.Tool(
        name="create_issue",
        input_schema={
            "type": "object",
            "title": "create_issueArguments",
            "properties": {
                "title": {"type": "string", "title": "Title"},
                "labels": {"type": "array", "items": {"type": "string", "title": "Label"}},
                "owner": {"anyOf": [{"type": "string", "title": "A"}, {"type": "null"}]},
            },
            "required": ["title"],
        },
    )
    assert _parameters(spec) == {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "labels": {"type": "array", "items": {"type": "string"}},
            "owner": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["title"],
    }


def test_a_tool_without_arguments_gets_an_empty_object_schema() -> None:
    assert _parameters(mt.Tool(name="ping", input_schema={})) == {"type": "object", "properties": {}}
