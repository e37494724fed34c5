"""The hostile-member table: every kind of run against every tool and command that could reach another
chat or an owner's data, with the expected allow or deny in each cell.

Each kind gets its authority from the code that gives it in production (bridge.sessions.authority via
the running Bridge), then runs the real tool on the real store. A cell is a probe that answers "did it
get through?", compared with the table. A tool or command that is registered without a row here fails
`test_every_tool_and_command_has_a_row`, so a new one cannot slip past this table.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bridge.app.registry import build_registry
from bridge.config import Settings
from bridge.events import ChatType, Inbound, Route
from bridge.gateway.commands import COMMANDS
from bridge.sessions.authority import Authority
from bridge.store.base import SessionMeta, SessionRow
from bridge.tools.base import AGENT_CHANNEL, SUBAGENT_CHANNEL, ToolContext, ToolResult
from devkit.fakes.loopback import LoopbackServer
from devkit.fakes.openai_server import FakeOpenAI, Reply, text, tool_call
from tests.harness import OWNER, Harness, running_bridge

SECRET = "the owner's secret 4411"
# [tools] with every tool that is off by default turned on, so each must have its row.
EVERY_TOOL: dict[str, Any] = {
    "web_search": {"provider": "searxng", "base_url": "http://127.0.0.1:9"},
    "exec": {"enabled": True},
    "browser": {"enabled": True},
}
OWNER_ID = f"test:{OWNER}"
GROUP = "test:group:g1"
TOPIC = "test:group:g1:topic:7"
OTHER = "test:group:g2"
DM = "test:dm:bob"
# A named session of the dashboard's web chat (bridge.http.webchat): a member's own DM there.
WEB_DM = "web:dm:scratch"
CHANNEL = "test:channel:c5"
# A sub-agent that a member's run in the group started (spawn_agent).
CHILD = "agent:0123456789abcdef:1"

ROUTES: dict[str, tuple[ChatType, str, str | None]] = {
    "main": ("dm", OWNER, None),
    DM: ("dm", "bob", None),
    GROUP: ("group", "g1", None),
    TOPIC: ("group", "g1", "7"),
    CHANNEL: ("channel", "c5", None),
    OTHER: ("group", "g2", None),
}


class SecretPage(LoopbackServer):
    """A page that shows the owner's secret, with a field and a link, as another chat's run opened it."""

    def routes(self, app: web.Application) -> None:
        async def page(request: web.Request) -> web.Response:
            body = f"<title>{SECRET}</title><p>{SECRET}</p><input name=q><a href='/secret'>{SECRET}</a>"
            return web.Response(text=body, content_type="text/html")

        app.router.add_get("/secret", page)


# Started by the `bot` fixture for each test (the browser's tests need [tools] allow_private_network).
PAGES = SecretPage()

# -- the kinds of run ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A kind of run: the session it runs in, and how production gives it its authority."""

    session: str
    authority: Callable[[Harness], Authority]
    channel: str | None = "test"


def _task(chat: str, maker: str | None, task_id: str) -> Callable[[Harness], Authority]:
    def make(h: Harness) -> Authority:
        made_by = h.bridge.authorities.for_chat(chat, maker)
        return h.bridge.authorities.of_task(
            made_by.to_json(), chat_key=chat, deliver_to=chat, task_id=task_id
        )

    return make


KINDS: dict[str, Kind] = {
    "main": Kind("main", lambda h: h.bridge.authorities.for_chat("main", OWNER_ID)),
    "member_dm": Kind(DM, lambda h: h.bridge.authorities.for_chat(DM, "test:bob")),
    "web_member": Kind(WEB_DM, lambda h: h.bridge.authorities.for_chat(WEB_DM, "web:scratch"), "web"),
    "group": Kind(GROUP, lambda h: h.bridge.authorities.for_chat(GROUP, "test:alice")),
    "topic": Kind(TOPIC, lambda h: h.bridge.authorities.for_chat(TOPIC, "test:alice")),
    "channel": Kind(CHANNEL, lambda h: h.bridge.authorities.for_chat(CHANNEL, "test:alice")),
    "owner_in_group": Kind(GROUP, lambda h: h.bridge.authorities.for_chat(GROUP, OWNER_ID)),
    "owner_task": Kind("cron:ownertask", _task("main", OWNER_ID, "ownertask"), "task"),
    "member_task": Kind("cron:membertask", _task(GROUP, "test:alice", "membertask"), "task"),
    "hook": Kind("hook:deploys", lambda h: h.bridge.authorities.for_hook("deploys", GROUP), "hook"),
    "agent": Kind(
        GROUP,
        lambda h: h.bridge.authorities.for_chat("main", OWNER_ID).narrowed(GROUP, "agent:main"),
        AGENT_CHANNEL,
    ),
    "member_subagent": Kind(
        CHILD,
        lambda h: h.bridge.authorities.for_chat(GROUP, "test:alice").spawned(CHILD),
        SUBAGENT_CHANNEL,
    ),
}
EVERYONE = frozenset(KINDS)
SEES_ALL = frozenset({"main", "owner_task"})
# Owners wherever they are, and the runs they cause (their tasks, their agents' requests).
OWNERS_AND_THEIRS = frozenset({"main", "owner_in_group", "owner_task", "agent"})

# -- the probes ----------------------------------------------------------------------------------

Probe = Callable[[Harness, ToolContext], Awaitable[bool]]


async def call(ctx: ToolContext, name: str, args: dict[str, Any]) -> ToolResult:
    tool = ctx.registry.get(name)
    assert tool is not None, name
    return await tool(args, ctx)


async def sees_main_listed(h: Harness, ctx: ToolContext) -> bool:
    result = await call(ctx, "sessions_list", {"message_limit": 5})
    return '"key": "main"' in result.content or SECRET in result.content


async def reads_main(h: Harness, ctx: ToolContext) -> bool:
    result = await call(ctx, "sessions_history", {"session_key": "main"})
    return result.ok and SECRET in result.content


async def reads_main_by_owners_dm_key(h: Harness, ctx: ToolContext) -> bool:
    result = await call(ctx, "sessions_history", {"session_key": f"test:dm:{OWNER}"})
    return result.ok and SECRET in result.content


async def reads_other_group(h: Harness, ctx: ToolContext) -> bool:
    return (await call(ctx, "sessions_history", {"session_key": OTHER})).ok


async def messages_other_chat(h: Harness, ctx: ToolContext) -> bool:
    result = await call(ctx, "sessions_send", {"session_key": OTHER, "message": "hi", "timeout_seconds": 0})
    return result.ok


async def schedules_into_main(h: Harness, ctx: ToolContext) -> bool:
    args = {"prompt": "post main here", "when": "in 2 hours", "deliver_to": "main"}
    return (await call(ctx, "schedule_task", args)).ok


async def schedules_into_other_group(h: Harness, ctx: ToolContext) -> bool:
    args = {"prompt": "spam", "when": "in 2 hours", "deliver_to": OTHER}
    return (await call(ctx, "schedule_task", args)).ok


async def schedules_every_minute(h: Harness, ctx: ToolContext) -> bool:
    return (await call(ctx, "schedule_task", {"prompt": "spam", "when": "* * * * *"})).ok


async def lists_mains_task(h: Harness, ctx: ToolContext) -> bool:
    owner = h.bridge.authorities.for_chat("main", OWNER_ID)
    task = await h.bridge.tasks.create(owner, "the owner's errand", "in 5 hours")
    return task.id in (await call(ctx, "list_tasks", {})).content


async def cancels_anothers_task_in_group(h: Harness, ctx: ToolContext) -> bool:
    carol = h.bridge.authorities.for_chat(GROUP, "test:carol")
    task = await h.bridge.tasks.create(carol, "carol's reminder", "in 5 hours")
    return (await call(ctx, "cancel_task", {"task_id": task.id})).ok


async def finds_mains_words(h: Harness, ctx: ToolContext) -> bool:
    return SECRET in (await call(ctx, "search_history", {"query": "secret"})).content


async def finds_another_chats_words_everywhere(h: Harness, ctx: ToolContext) -> bool:
    result = await call(ctx, "search_history", {"query": "another group", "scope": "all"})
    # Refused out loud, never answered from a narrower scope instead.
    assert result.ok or result.code == "not_allowed", result.content
    return "another group's words" in result.content


async def finds_another_chats_words_in_its_chat(h: Harness, ctx: ToolContext) -> bool:
    found = ""
    for query in ("another group", "secret"):
        found += (await call(ctx, "search_history", {"query": query, "scope": "chat"})).content
    # main's own words are main's to find; any other chat's, or main's from elsewhere, are not.
    return "another group's words" in found or (SECRET in found and ctx.session.key != "main")


async def writes_mains_memory(h: Harness, ctx: ToolContext) -> bool:
    await call(ctx, "save_memory", {"content": "planted by a run"})
    return any("planted" in m for m in await h.bridge.store.memories("main", 50))


def _workspace_file(workspace: Path, name: str) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / name).write_text("x", encoding="utf-8")


async def sends_file_to_another_chat(h: Harness, ctx: ToolContext) -> bool:
    await asyncio.to_thread(_workspace_file, Path(ctx.settings.tools.workspace), "note.txt")
    before = len(h.sender.sent)
    result = await call(ctx, "send_file", {"path": "note.txt"})
    sent = h.sender.sent[before:]
    # A chat's run sends it to its own chat (checked, so the probe can see a send at all).
    assert result.ok == bool(sent), (result, sent)
    return any(item.session_key != ctx.session.key for item in sent)


async def runs_a_command(h: Harness, ctx: ToolContext) -> bool:
    result = await call(ctx, "run_command", {"command": "echo ran-in-the-sandbox"})
    # Refused or not, never for another reason: the sandbox works where this table runs.
    assert result.ok or result.code == "not_allowed", result.content
    return result.ok and "ran-in-the-sandbox" in result.content


async def runs_python(h: Harness, ctx: ToolContext) -> bool:
    result = await call(ctx, "run_python", {"code": "print(6 * 7)"})
    assert result.ok or result.code == "not_allowed", result.content
    return result.ok and "42" in result.content


async def sees_another_chats_page(h: Harness, ctx: ToolContext) -> bool:
    """Another group's run has a page open that shows the owner's secret; can this run read it?"""
    other = await h.bridge.store.ensure_active_session(OTHER)
    opener = replace(ctx, session=other, authority=h.bridge.authorities.for_chat(OTHER, "test:dave"))
    opened = await call(opener, "open", {"url": f"{PAGES.origin}/secret"})
    assert opened.ok, opened.content
    looked = [await call(ctx, name, {}) for name in ("snapshot", "screenshot")]
    clicked = await call(ctx, "click", {"n": 1})
    typed = await call(ctx, "type", {"n": 1, "text": "x"})
    return any(SECRET in r.content for r in (*looked, clicked, typed))


def _child_model(reads_main: bool) -> Callable[[dict[str, Any]], Reply]:
    """The model of a sub-agent the probe starts: it answers "child done", or first tries to read main
    (load sessions, sessions_history main) and answers with what it got."""

    def script(request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        made = sum(1 for m in messages if m["role"] == "tool")
        if reads_main and made == 0:
            return tool_call("load_tool_group", {"group_name": "sessions"})
        if reads_main and made == 1:
            return tool_call("sessions_history", {"session_key": "main"})
        return text(str(messages[-1]["content"]) if reads_main else "child done")

    return script


async def _spawn(h: Harness, ctx: ToolContext, task: str, *, reads_main: bool) -> ToolResult:
    h.llm.script = _child_model(reads_main)
    try:
        return await call(ctx, "spawn_agent", {"task": task})
    finally:
        h.llm.script = None


async def spawns_a_subagent(h: Harness, ctx: ToolContext) -> bool:
    result = await _spawn(h, ctx, "say you are done", reads_main=False)
    # Refused out loud, never failing for another reason.
    assert result.ok or result.code == "not_allowed", result.content
    return result.ok and "child done" in result.content


async def subagent_reads_main(h: Harness, ctx: ToolContext) -> bool:
    result = await _spawn(h, ctx, "read main's history", reads_main=True)
    return SECRET in result.content


# Probe → the kinds it must get through for; every other kind must be refused.
TOOL_TABLE: dict[str, tuple[Probe, frozenset[str]]] = {
    "sessions_list sees main": (sees_main_listed, SEES_ALL),
    "sessions_history reads main": (reads_main, SEES_ALL),
    "sessions_history reads main by the owner's DM key": (reads_main_by_owners_dm_key, SEES_ALL),
    "sessions_history reads another group": (reads_other_group, SEES_ALL),
    "sessions_send messages another chat": (messages_other_chat, SEES_ALL),
    "schedule_task posts into main": (schedules_into_main, SEES_ALL),
    "schedule_task posts into another group": (schedules_into_other_group, SEES_ALL),
    "schedule_task every minute": (
        schedules_every_minute,
        frozenset({"main", "member_dm", "web_member", "owner_in_group", "owner_task", "agent"}),
    ),
    "list_tasks shows main's tasks": (lists_mains_task, SEES_ALL),
    "cancel_task cancels another member's task": (
        cancels_anothers_task_in_group,
        frozenset({"main", "owner_task", "owner_in_group", "agent"}),
    ),
    "search_history finds main's words": (finds_mains_words, frozenset({"main"})),
    "search_history scope=all finds another chat's words": (finds_another_chats_words_everywhere, SEES_ALL),
    "search_history scope=chat finds another chat's words": (
        finds_another_chats_words_in_its_chat,
        frozenset(),
    ),
    "save_memory writes main's memory": (writes_mains_memory, frozenset({"main"})),
    "send_file reaches another chat": (sends_file_to_another_chat, frozenset()),
    "run_command runs a command": (runs_a_command, OWNERS_AND_THEIRS),
    "run_python runs code": (runs_python, OWNERS_AND_THEIRS),
    "the browser shows another chat's page": (sees_another_chats_page, frozenset()),
    # Whoever may run a turn may start a sub-agent, which acts for them; never a sub-agent (depth 1),
    # nor a run answering another session's agent.
    "spawn_agent starts a sub-agent": (spawns_a_subagent, EVERYONE - {"agent", "member_subagent"}),
    # A sub-agent's authority is its parent's narrowed to its own session: even an owner's reads
    # no other chat.
    "spawn_agent's sub-agent reads main": (subagent_reads_main, frozenset()),
}

# Which cells each tool is probed by. A tool whose row is a reason instead cannot name or reach another
# chat or an owner's data: its arguments name no chat, and it works in the run's own session or
# workspace. MCP and manifest tools are the operator's and get only their arguments.
TOOL_ROWS: dict[str, tuple[str, ...] | str] = {
    "sessions_list": ("sessions_list sees main",),
    "sessions_history": (
        "sessions_history reads main",
        "sessions_history reads main by the owner's DM key",
        "sessions_history reads another group",
    ),
    "sessions_send": ("sessions_send messages another chat",),
    "schedule_task": (
        "schedule_task posts into main",
        "schedule_task posts into another group",
        "schedule_task every minute",
    ),
    "list_tasks": ("list_tasks shows main's tasks",),
    "cancel_task": ("cancel_task cancels another member's task",),
    "search_history": (
        "search_history finds main's words",
        "search_history scope=all finds another chat's words",
        "search_history scope=chat finds another chat's words",
    ),
    "save_memory": ("save_memory writes main's memory",),
    "send_file": ("send_file reaches another chat",),
    "spawn_agent": ("spawn_agent starts a sub-agent", "spawn_agent's sub-agent reads main"),
    "load_tool_group": "loads tool schemas into the run; names no chat",
    "get_current_time": "reads the clock",
    "load_skill": "reads an operator-configured skill's instructions",
    "read_file": "the workspace only (tests/tools/test_files.py tries to escape it)",
    "write_file": "the workspace only (tests/tools/test_files.py tries to escape it)",
    "list_files": "the workspace only (tests/tools/test_files.py tries to escape it)",
    "webfetch": "public web pages only (the SSRF guard, tests/tools/test_web.py)",
    "web_search": "asks the operator's search provider; names no chat (tests/tools/test_web_search.py)",
    # The sandbox's escapes (config, database, network, symlinks, fork bombs) are tests/tools/test_exec.py.
    "run_command": ("run_command runs a command",),
    "run_python": ("run_python runs code",),
    # Public pages only, every request through the SSRF guard (tests/tools/test_browser.py); here, that
    # a session's browser context is its own.
    "open": ("the browser shows another chat's page",),
    "snapshot": ("the browser shows another chat's page",),
    "click": ("the browser shows another chat's page",),
    "type": ("the browser shows another chat's page",),
    "screenshot": ("the browser shows another chat's page",),
}

# -- the commands --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """Where a person says a command, and who: the chat kinds of the table that can say commands."""

    chat_type: ChatType
    chat_id: str
    sender: str
    thread_id: str | None = None


PLACES: dict[str, Place] = {
    "main": Place("dm", OWNER, OWNER),
    "member_dm": Place("dm", "bob", "bob"),
    "group": Place("group", "g1", "alice"),
    "topic": Place("group", "g1", "alice", "7"),
    "channel": Place("channel", "c5", "alice"),
    "owner_in_group": Place("group", "g1", OWNER),
}
OWNER_PLACES = frozenset({"main", "owner_in_group"})

CommandProbe = Callable[[Harness, Callable[[str], Awaitable[str]]], Awaitable[bool]]


async def send_off(h: Harness, say: Callable[[str], Awaitable[str]]) -> bool:
    return (await say("/send off")).startswith("Send policy for this session: off")


async def switch_model(h: Harness, say: Callable[[str], Awaitable[str]]) -> bool:
    return (await say("/model cheap")).startswith("This chat now uses the model profile cheap")


async def switch_agent(h: Harness, say: Callable[[str], Awaitable[str]]) -> bool:
    return (await say("/agent helper")).startswith("This chat now uses the agent helper")


async def voice_on(h: Harness, say: Callable[[str], Awaitable[str]]) -> bool:
    return (await say("/voice on")).startswith("Spoken replies in this chat: on")


async def cancel_in_group(h: Harness, say: Callable[[str], Awaitable[str]]) -> bool:
    carol = h.bridge.authorities.for_chat(GROUP, "test:carol")
    task = await h.bridge.tasks.create(carol, "carol's reminder", "in 5 hours")
    return (await say(f"/tasks cancel {task.id}")).startswith("Cancelled task")


async def list_pairing(h: Harness, say: Callable[[str], Awaitable[str]]) -> bool:
    return (await say("/pair")).startswith("No pairing codes are waiting")


COMMAND_TABLE: dict[str, tuple[CommandProbe, frozenset[str]]] = {
    "/send off": (send_off, OWNER_PLACES),
    "/model NAME": (switch_model, OWNER_PLACES),
    # main keeps the default agent: there the owner is told so, and nothing changes.
    "/agent NAME": (switch_agent, frozenset({"owner_in_group"})),
    # A member's own DM is theirs to hear; a group's answers are everyone's (bridge.gateway.voice_out).
    "/voice on": (voice_on, OWNER_PLACES | {"member_dm"}),
    "/tasks cancel of another member's task in the group": (
        cancel_in_group,
        frozenset({"main", "owner_in_group"}),
    ),
    "/pair": (list_pairing, frozenset({"main"})),
}
COMMAND_ROWS: dict[str, tuple[str, ...] | str] = {
    "send": ("/send off",),
    "model": ("/model NAME",),
    "agent": ("/agent NAME",),
    "voice": ("/voice on",),
    "tasks": ("/tasks cancel of another member's task in the group",),
    "pair": ("/pair",),
    "clear": "the chat's own session",
    "new": "the chat's own session",
    "status": "the chat's own session",
    "stop": "the chat's own run",
    "retry": "the chat's own last message",
    "compact": "the chat's own history",
    "help": "the list of commands",
}

# -- the fixture ---------------------------------------------------------------------------------


@pytest.fixture
async def bot(tmp_path: Path) -> AsyncIterator[Harness]:
    profiles = {"profiles": {"cheap": {"model": "cheap-model"}}}
    # An agent an owner can give a chat with /agent helper.
    agents = {"helper": {"language": "German"}}
    # The tools that reach outside, on: a page of the test's own on loopback is what the browser opens.
    tools = {**EVERY_TOOL, "workspace": str(tmp_path / "workspace"), "allow_private_network": True}
    async with (
        FakeOpenAI() as llm,
        PAGES,
        running_bridge(tmp_path, llm, llm=profiles, tools=tools, agents=agents) as h,
    ):
        store = h.bridge.store
        # Every chat where people could have written, with its address, so a file or answer could go.
        for key, (chat_type, chat_id, thread) in ROUTES.items():
            meta = SessionMeta(
                surface="test", chat_type=chat_type, last_route=Route("test", chat_id, thread).to_json()
            )
            await store.ensure_active_session(key, meta)
        main = await store.ensure_active_session("main")
        await store.add_user_message(main.id, f"remember {SECRET}", sender=OWNER_ID)
        await store.add_memory("main", f"the owner's memory: {SECRET}")
        other = await store.ensure_active_session(OTHER)
        await store.add_user_message(other.id, "another group's words", sender="test:dave")
        yield h


async def context_of(h: Harness, kind: Kind) -> ToolContext:
    session: SessionRow = await h.bridge.store.ensure_active_session(kind.session)
    return ToolContext(
        settings=h.bridge.settings,
        store=h.bridge.store,
        registry=h.bridge.registry,
        session=session,
        run_id="probe",
        authority=kind.authority(h),
        authorities=h.bridge.authorities,
        channel=kind.channel,
        messenger=h.bridge.a2a,
        tasks=h.bridge.tasks,
        files=h.bridge.runner.files,
        spawner=h.bridge.subagents,
    )


# -- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("cell", sorted(TOOL_TABLE))
async def test_tool_cell(bot: Harness, kind: str, cell: str) -> None:
    probe, allowed = TOOL_TABLE[cell]
    got_through = await probe(bot, await context_of(bot, KINDS[kind]))
    expected = "allow" if kind in allowed else "deny"
    assert ("allow" if got_through else "deny") == expected, f"{cell} for a {kind} run"


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("cell", sorted(COMMAND_TABLE))
async def test_command_cell(bot: Harness, place: str, cell: str) -> None:
    probe, allowed = COMMAND_TABLE[cell]
    where = PLACES[place]

    async def say(text: str) -> str:
        before = len(bot.sender.sent)
        inbound = Inbound(
            "test",
            where.chat_type,
            where.chat_id,
            where.sender,
            text,
            thread_id=where.thread_id,
            mentioned=True,
        )
        done = await bot.bridge.handle(inbound)
        if done is not None:
            await done
        notices = [item.text for item in bot.sender.sent[before:] if item.kind == "notice"]
        assert len(notices) == 1, notices
        return notices[0]

    got_through = await probe(bot, say)
    expected = "allow" if place in allowed else "deny"
    assert ("allow" if got_through else "deny") == expected, f"{cell} said in {place}"


def test_every_tool_and_command_has_a_row(tmp_path: Path) -> None:
    skills = tmp_path / "skills" / "one"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text("---\nname: one\ndescription: a skill\n---\nDo it.\n", encoding="utf-8")
    # Every tool there can be, the ones that reach outside (off by default) enabled.
    registry = build_registry(Settings(skills={"paths": [str(tmp_path / "skills")]}, tools=EVERY_TOOL))
    names = {t.name for t in registry.core_tools()} | {t.name for g in registry.groups() for t in g.tools}
    missing = sorted(names - set(TOOL_ROWS))
    assert not missing, f"tools without a row in the hostile-member table: {missing}"
    assert not sorted(set(TOOL_ROWS) - names), "rows for tools that are not registered"
    for tool, row in TOOL_ROWS.items():
        if isinstance(row, tuple):
            assert row and all(cell in TOOL_TABLE for cell in row), tool
    commands = {name for name, _ in COMMANDS}
    assert commands == set(COMMAND_ROWS), "every command has a row in the hostile-member table"
    for command, row in COMMAND_ROWS.items():
        if isinstance(row, tuple):
            assert row and all(cell in COMMAND_TABLE for cell in row), command


async def test_the_admin_api_answers_nothing_without_the_operators_token(tmp_path: Path) -> None:
    from tests.http.conftest import admin_bridge, client_of

    async with FakeOpenAI() as llm, admin_bridge(tmp_path, llm) as (_, server, base):
        routes = [
            (route.method, route.resource.canonical)
            for route in server.app().router.routes()
            if route.resource is not None and route.method in ("GET", "POST")
        ]
        opened: list[str] = []
        async with client_of(base, token=None) as client:
            for method, path in routes:
                if path.startswith(("/login", "/hooks/", "/static")):
                    continue  # the form itself, hooks (signed, tests/tasks) and the stylesheet
                url = path.replace("{key}", "main").replace("{run_id}", "r").replace("{row_id}", "1")
                url = url.replace("{code}", "X").replace("{name}", "x")
                answer = await client.request(method, url, headers={"Accept": "application/json"})
                if answer.status_code not in (401, 403, 429):
                    opened.append(f"{method} {url}: {answer.status_code}")
        assert routes and not opened, opened
        assert json.dumps(routes)  # listed, so a route added later is probed too
