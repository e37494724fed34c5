"""FEAT-040 and FEAT-044 end to end: dispatcher → runner → real HTTP to the fake model → store."""

from __future__ import annotations

import json
from pathlib import Path

from bridge.store.base import ToolExchange
from bridge.tools.base import Tool, ToolGroup, ToolResult, params
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.scripted_model import HistoryTrustingModel
from tests.harness import CORE_TOOLS, Harness, pdf_group, running_bridge

SESSIONS_TOOLS = ["sessions_list", "sessions_history", "sessions_send", "spawn_agent"]


def tool_messages(body: dict) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def system_prompt(body: dict) -> str:
    assert body["messages"][0]["role"] == "system"
    return body["messages"][0]["content"]


async def test_first_request_of_a_new_conversation_sends_core_tools_only(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # TEST-040-01
    fake_llm.push(fake.text("hi"))
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),)) as h:
        await h.say("hello")
    assert h.request_tools(0) == CORE_TOOLS
    assert h.sender.of("reply") == ["hi"]


async def test_system_prompt_lists_every_group_with_its_description(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # TEST-040-02
    fake_llm.push(fake.text("hi"))
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),)) as h:
        await h.say("hello")
    prompt = system_prompt(fake_llm.requests[0])
    assert "## Available Tool Groups" in prompt
    for line in (
        "- sessions: List chat sessions",
        "- files: Read, write, list and send files",
        "- web: Fetch a web page",
        "- pdf: Extract text, get info, and render pages from PDF files",
    ):
        assert line in prompt


async def test_loading_a_group_lists_its_tools_and_makes_them_usable_in_the_same_run(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # TEST-040-03 and TEST-040-13
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "pdf"}),
        fake.tool_call("pdf_info", {"path": "a.pdf"}),
        fake.text("3 pages"),
    )
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),)) as h:
        await h.say("how many pages has a.pdf?")
    loaded_result = tool_messages(fake_llm.requests[1])[-1]
    assert "Loaded 2 tools from group 'pdf'" in loaded_result
    assert "- pdf_info: Page count and metadata of a PDF" in loaded_result
    assert "- pdf_extract_text: Text of a PDF" in loaded_result
    assert h.request_tools(1) == [*CORE_TOOLS, "pdf_info", "pdf_extract_text"]
    assert tool_messages(fake_llm.requests[2])[-1] == '{"path": "a.pdf", "pages": 3}'
    assert h.sender.of("reply") == ["3 pages"]
    # The system prompt, built once a run until a call loads something, says so from the next request.
    prompts = [system_prompt(fake_llm.requests[i]) for i in range(3)]
    assert "- pdf (loaded):" not in prompts[0]
    assert "- pdf (loaded):" in prompts[1]
    assert prompts[2] == prompts[1]


async def test_loading_an_unknown_group_lists_the_available_groups(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # TEST-040-04
    fake_llm.push(fake.tool_call("load_tool_group", {"group_name": "nonexistent"}), fake.text("sorry"))
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),)) as h:
        await h.say("load nonexistent")
    result = tool_messages(fake_llm.requests[1])[-1]
    assert "not_found" in result
    assert (
        "Tool group 'nonexistent' not found. Available groups: sessions, files, web, scheduled_tasks, pdf"
        in result
    )
    assert h.request_tools(1) == CORE_TOOLS


async def test_two_groups_can_be_loaded_at_once(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    # TEST-040-06, with both loads in one model response
    fake_llm.push(
        fake.tool_calls(
            fake.tool_call("load_tool_group", {"group_name": "pdf"}),
            fake.tool_call("load_tool_group", {"group_name": "sessions"}),
        ),
        fake.text("ready"),
    )
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),)) as h:
        await h.say("load pdf and sessions")
    assert set(h.request_tools(1)) == {*CORE_TOOLS, "pdf_info", "pdf_extract_text", *SESSIONS_TOOLS}


async def test_loading_a_loaded_group_again_succeeds_without_duplicate_schemas(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # TEST-040-07
    fake_llm.push(
        fake.tool_call("load_tool_group", {"group_name": "pdf"}),
        fake.tool_call("load_tool_group", {"group_name": "pdf"}, call_id="second"),
        fake.text("ok"),
        # A later turn loads it again: plain success, nothing duplicated.
        fake.tool_call("load_tool_group", {"group_name": "pdf"}),
        fake.text("still ok"),
    )
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),)) as h:
        await h.say("load pdf")
        await h.say("load pdf once more")
    # Within one run, the immediate identical repeat is not run: the answer is asked for instead.
    assert "tools" not in fake_llm.requests[2] and h.sender.of("reply")[0] == "ok"
    turn2 = h.first_request_of_turn("load pdf once more")
    result = tool_messages(fake_llm.requests[turn2 + 1])[-1]
    assert "already loaded" in result and "Error" not in result
    tools = h.request_tools(turn2 + 1)
    assert tools.count("pdf_info") == 1 and len(tools) == len(set(tools))


async def test_with_over_a_hundred_tools_only_core_schemas_are_sent_first(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # TEST-040-08 and TEST-040-09
    async def noop(args: dict, ctx: object) -> ToolResult:
        return ToolResult.success("ok")

    groups = tuple(
        ToolGroup(
            f"group{g}",
            f"Group number {g}",
            tuple(Tool(f"g{g}_tool{t}", f"Tool {t} of group {g}", params(), noop) for t in range(17)),
        )
        for g in range(7)
    )
    fake_llm.push(fake.tool_call("load_tool_group", {"group_name": "group3"}), fake.text("ok"))
    async with running_bridge(tmp_path, fake_llm, extra_groups=groups) as h:
        assert (
            len(h.bridge.registry.core_tools()) + sum(len(g.tools) for g in h.bridge.registry.groups()) > 100
        )
        await h.say("load group3")
    assert h.request_tools(0) == CORE_TOOLS
    assert len(h.request_tools(1)) == len(CORE_TOOLS) + 17


async def test_grouped_tool_is_refused_before_its_group_is_loaded_with_a_hint(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # TEST-040-12
    fake_llm.push(fake.tool_call("pdf_info", {"path": "a.pdf"}), fake.text("I need to load it"))
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),)) as h:
        await h.say("pages of a.pdf?")
    result = tool_messages(fake_llm.requests[1])[-1]
    assert "not_loaded" in result
    assert "group_name='pdf'" in result


async def test_turn_two_first_request_already_carries_the_group_loaded_in_turn_one(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # FEAT-044: the failing case of the seeds, with a model that trusts its history.
    model = HistoryTrustingModel()
    async with FakeOpenAI(model) as llm, running_bridge(tmp_path, llm) as h:
        await h.say("show my sessions")
        await h.say("show my sessions again")
        turn2 = h.first_request_of_turn("show my sessions again")
        assert set(SESSIONS_TOOLS) <= set(h.request_tools(turn2))
        # The model called sessions_list directly (no reload) and it worked.
        calls = [c["function"]["name"] for c in llm.requests[turn2 + 1]["messages"][-2]["tool_calls"]]
        assert calls == ["sessions_list"]
        assert model.seen_errors == []
        loads = [
            c
            for body in llm.requests[turn2:]
            for m in body["messages"][-2:]
            for c in m.get("tool_calls") or []
        ]
        assert all(c["function"]["name"] != "load_tool_group" for c in loads)
        assert "- sessions (loaded):" in system_prompt(llm.requests[turn2])


async def test_clear_starts_a_session_with_no_groups(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    model = HistoryTrustingModel()
    async with FakeOpenAI(model) as llm, running_bridge(tmp_path, llm) as h:
        await h.say("show my sessions")
        await h.say("/clear")
        assert "Started a new session" in h.sender.of("notice")[-1]
        await h.say("hello again")
        turn = h.first_request_of_turn("hello again")
        assert h.request_tools(turn) == CORE_TOOLS
        # The new session's history holds nothing from before the clear.
        assert [m["role"] for m in llm.requests[turn]["messages"]] == ["system", "user"]


async def seeded(h: Harness, *exchanges: ToolExchange) -> str:
    """Give the owner's main session a history with these tool exchanges; returns the session id."""
    store = h.bridge.store
    session = await store.ensure_active_session("main")
    await store.start_run("seed", session.id, "test", "x")
    for exchange in exchanges:
        await store.add_tool_exchange(session.id, "seed", exchange)
    return session.id


def load_exchange(group_input: str, status: str = "success", call_id: str = "c1") -> ToolExchange:
    return ToolExchange(call_id, "load_tool_group", group_input, "result", status, step=1)


async def test_a_failed_load_is_not_restored(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("hi"))
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),)) as h:
        await seeded(h, load_exchange('{"group_name":"pdf"}', status="error"))
        await h.say("hello")
    assert h.request_tools(0) == CORE_TOOLS


async def test_a_malformed_tool_input_is_skipped_and_the_rest_restored(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("hi"))
    async with running_bridge(tmp_path, fake_llm, extra_groups=(pdf_group(),)) as h:
        await seeded(
            h,
            load_exchange('{"group_name": "pdf"', call_id="bad"),
            load_exchange('{"group_name": 7}', call_id="num"),
            load_exchange('{"group_name":"sessions"}', call_id="good"),
        )
        await h.say("hello")
    assert h.request_tools(0) == [*CORE_TOOLS, *SESSIONS_TOOLS]


async def test_a_group_that_left_the_registry_is_ignored(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("hi"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await seeded(
            h, load_exchange('{"group_name":"retired"}'), load_exchange('{"group_name":"web"}', call_id="w")
        )
        await h.say("hello")
    assert h.request_tools(0) == [*CORE_TOOLS, "webfetch"]
    assert "retired" not in system_prompt(fake_llm.requests[0])


async def test_a_group_loaded_two_hundred_turns_ago_is_still_restored(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("hi"))
    async with running_bridge(
        tmp_path, fake_llm, extra_groups=(pdf_group(),), agent={"history_limit": 20}
    ) as h:
        session_id = await seeded(h, load_exchange('{"group_name":"pdf"}'))
        for turn in range(200):
            await h.bridge.store.add_user_message(session_id, f"question {turn}")
            await h.bridge.store.add_assistant_message(session_id, None, f"answer {turn}")
        await h.say("pages of a.pdf?")
    body = fake_llm.requests[0]
    assert h.request_tools(0) == [*CORE_TOOLS, "pdf_info", "pdf_extract_text"]
    # The load itself is long out of the window that was sent.
    assert all("load_tool_group" not in json.dumps(m) for m in body["messages"][1:])
    assert len(body["messages"]) <= 21
