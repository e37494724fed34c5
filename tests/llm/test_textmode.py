"""The strict text-mode tool protocol: what is a call, what is only text, and how history is replayed."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.llm.base import ChatMessage, ToolCall
from bridge.llm.textmode import parse_leaked, parse_reply
from bridge.llm.textprompt import describe_tools, render_call, to_text_messages

ALLOWED = {"list_files", "get_current_time", "load_tool_group"}


def block(payload: object, label: str = "json") -> str:
    body = payload if isinstance(payload, str) else json.dumps(payload)
    return f"```{label}\n{body}\n```"


def test_a_valid_tool_block_is_one_call_with_its_arguments() -> None:
    text = "Let me look.\n" + block({"tool_name": "list_files", "arguments": {"path": "."}}, "tool")
    parsed = parse_reply(text, ALLOWED)
    assert parsed.call is not None
    assert parsed.call.name == "list_files"
    assert json.loads(parsed.call.arguments) == {"path": "."}
    assert parsed.call.id.startswith("call_")
    assert parsed.text == "Let me look."


def test_the_name_and_arguments_shape_small_local_models_write_is_accepted() -> None:
    parsed = parse_reply(block({"name": "get_current_time", "arguments": {}}), ALLOWED)
    assert parsed.call is not None and parsed.call.name == "get_current_time"
    assert parsed.text == ""


def test_prose_that_mentions_ls_is_never_a_call() -> None:
    for text in (
        "You can run ls to see the files, or `ls -la` for details.",
        "Try this:\n```sh\nls -la\ncat notes.txt\n```",
        "**list_files** path=.",
        'list_files(path=".")',
    ):
        assert parse_reply(text, ALLOWED).call is None, text


def test_an_echoed_tool_result_object_is_never_a_call() -> None:
    for payload in (
        {"tool_name": "tool.result", "arguments": {"content": "a.txt"}},
        {"name": "tool_result", "arguments": {}},
    ):
        parsed = parse_reply(block(payload), ALLOWED | {"tool.result", "tool_result"})
        assert parsed.call is None
        assert parsed.ignored[0].reason == "reserved"


def test_a_block_repeating_a_tool_result_seen_earlier_is_not_a_call() -> None:
    payload = {"tool_name": "list_files", "arguments": {"path": "/"}}
    result = f"The page says: {json.dumps(payload)} and more."
    parsed = parse_reply("It said:\n" + block(payload), ALLOWED, echoes=[result])
    assert parsed.call is None
    assert parsed.ignored[0].reason == "echo"


def test_a_name_outside_the_allowed_set_is_text_not_a_call() -> None:
    text = block({"tool_name": "rm_rf", "arguments": {"path": "/"}})
    parsed = parse_reply(text, ALLOWED)
    assert parsed.call is None
    assert parsed.text == text
    assert parsed.ignored[0].reason == "not_allowed"


def test_only_the_first_of_several_calls_runs_and_the_others_leave_the_text() -> None:
    text = "\n".join(
        [
            "First this.",
            block({"tool_name": "list_files", "arguments": {}}),
            "Then that.",
            block({"tool_name": "get_current_time", "arguments": {}}),
        ]
    )
    parsed = parse_reply(text, ALLOWED)
    assert parsed.call is not None and parsed.call.name == "list_files"
    assert "get_current_time" not in parsed.text
    assert [i.reason for i in parsed.ignored] == ["extra_call"]


def test_a_list_of_calls_in_one_block_runs_only_the_first() -> None:
    payload = [{"name": "get_current_time", "arguments": {}}, {"name": "list_files", "arguments": {}}]
    parsed = parse_reply(block(payload), ALLOWED)
    assert parsed.call is not None and parsed.call.name == "get_current_time"


def test_only_json_and_tool_labels_make_calls() -> None:
    payload = {"tool_name": "list_files", "arguments": {}}
    assert parse_reply(block(payload, "JSON"), ALLOWED).call is not None
    for label in ("", "python", "text", "tool.result"):
        assert parse_reply(block(payload, label), ALLOWED).call is None, label


def test_ordinary_json_is_not_a_call() -> None:
    for payload in (
        {"name": "list_files"},  # a name alone: a person, a file, a setting
        {"tool_name": "list_files", "arguments": [1, 2]},
        {"tool_name": "list_files", "arguments": "not json"},
        {"tool_name": 3, "arguments": {}},
        {"tool_name": "list files; rm", "arguments": {}},
        '{"tool_name": "list_files", "arguments": {',
        "[]",
        "null",
    ):
        assert parse_reply(block(payload), ALLOWED).call is None, payload


def test_arguments_sent_as_json_text_or_left_out_are_normalized() -> None:
    parsed = parse_reply(block({"tool_name": "list_files", "arguments": '{"path": "docs"}'}), ALLOWED)
    assert parsed.call is not None and json.loads(parsed.call.arguments) == {"path": "docs"}
    parsed = parse_reply(block({"tool_name": "get_current_time"}), ALLOWED)
    assert parsed.call is not None and parsed.call.arguments == "{}"


def test_a_fence_inside_a_line_of_prose_is_not_a_block() -> None:
    text = 'Write ```json {"tool_name": "list_files", "arguments": {}}``` to call it.'
    assert parse_reply(text, ALLOWED).call is None


def test_tools_are_described_with_their_arguments_and_the_protocol() -> None:
    schema = {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List a folder\nof the workspace.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Folder to list."},
                    "depth": {"type": "integer"},
                    "sort": {"enum": ["name", "size"]},
                },
                "required": ["path"],
            },
        },
    }
    text = describe_tools([schema])
    assert '{"tool_name": "<tool name>", "arguments":' in text
    assert '- list_files(path: string, depth?: integer, sort?: "name" | "size"): List a folder of' in text
    assert "    path: Folder to list." in text


def test_history_replays_calls_as_canonical_blocks_one_per_message_with_results_after() -> None:
    calls = (ToolCall("c1", "list_files", '{"path":"."}'), ToolCall("c2", "get_current_time", "{}"))
    messages = [
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "files and time?"),
        ChatMessage("assistant", "Checking.", tool_calls=calls),
        ChatMessage("tool", "a.txt", tool_call_id="c1", name="list_files"),
        ChatMessage("tool", "12:00", tool_call_id="c2", name="get_current_time"),
    ]
    out = to_text_messages(messages, [{"function": {"name": "list_files"}}], "tool")
    assert [m.role for m in out] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert out[0].content.startswith("Be brief.\n\n## Tools")
    assert all(not m.tool_calls for m in out)
    assert out[2].content == "Checking.\n\n" + render_call(calls[0])
    assert out[3].content == "[tool.result of list_files]\na.txt" and out[3].tool_call_id == "c1"
    assert out[4].content == render_call(calls[1])
    # The replayed call is itself a valid call under the protocol.
    assert parse_reply(out[4].content, ALLOWED).call is not None


def test_results_can_go_back_as_user_messages_for_templates_without_a_tool_role() -> None:
    messages = [
        ChatMessage("user", "time?"),
        ChatMessage("assistant", "", tool_calls=(ToolCall("c1", "get_current_time", "{}"),)),
        ChatMessage("tool", "12:00", tool_call_id="c1", name="get_current_time"),
    ]
    out = to_text_messages(messages, [], "user")
    assert [m.role for m in out] == ["user", "assistant", "user"]
    assert out[2].tool_call_id is None


def test_a_request_without_tools_does_not_teach_the_protocol() -> None:
    out = to_text_messages([ChatMessage("system", "Be brief.")], [], "tool")
    assert out[0].content == "Be brief."


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_random_text_never_raises(text: str) -> None:
    parsed = parse_reply(text, ALLOWED, echoes=[text[:10]])
    assert parsed.call is None or parsed.call.name in ALLOWED


_FENCY = st.lists(
    st.sampled_from(
        [
            "```",
            "```json\n",
            "```tool\n",
            "\n```",
            "\n",
            "{",
            "}",
            "[",
            "]",
            '"tool_name"',
            '"name"',
            ":",
            '"arguments"',
            '"list_files"',
            '"tool.result"',
            ",",
            "{}",
            '"x"',
            "null",
            "1e999",
            "\\",
            " ",
        ]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(_FENCY)
def test_fence_shaped_noise_never_raises_and_never_calls_outside_the_allowed_set(text: str) -> None:
    parsed = parse_reply(text, ALLOWED)
    if parsed.call is not None:
        assert parsed.call.name in ALLOWED
        assert isinstance(json.loads(parsed.call.arguments), dict)


def test_in_native_mode_a_reply_that_is_only_a_bare_call_object_is_the_call_the_server_missed() -> None:
    parsed = parse_leaked('  {"name": "get_current_time", "arguments": {"timezone": "UTC"}}\n', ALLOWED)
    assert parsed.call is not None and parsed.call.name == "get_current_time"
    assert json.loads(parsed.call.arguments) == {"timezone": "UTC"} and parsed.text == ""
    # Fenced, as the strict protocol writes it, is a call here too.
    assert parse_leaked(block({"name": "list_files", "arguments": {}}), ALLOWED).call is not None


def test_in_native_mode_json_in_prose_or_naming_no_offered_tool_is_only_text() -> None:
    for text in (
        'Send {"name": "get_current_time", "arguments": {}} to ask for the time.',
        '{"name": "rm_rf", "arguments": {}}',
        '{"name": "tool.result", "arguments": {}}',
        '{"name": "Alice", "age": 3}',
    ):
        assert parse_leaked(text, ALLOWED | {"tool.result"}).call is None, text
    echoed = '{"name": "list_files", "arguments": {}}'
    assert parse_leaked(echoed, ALLOWED, echoes=[f"result: {echoed}"]).call is None
