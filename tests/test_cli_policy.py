"""The send policy, /send, `bridge policy explain`, the session tools and live reload, through `bridge chat`.

Every test runs the real console script as a subprocess against FakeOpenAI. Where a test has to act
between lines (agent-to-agent exchanges that end in the background, config edits), stdin stays open
and the output is read as it comes, with bounded waits.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

from bridge.store.base import SessionMeta, SessionRow, ToolExchange
from bridge.store.sqlite import SQLiteStore
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from devkit.processes import start_bridge
from tests.fakes.a2a_model import AgentToAgentModel
from tests.test_cli import Finished, assert_no_traceback, bridge, first_request_for, write_config
from tests.waiting import WAIT_S, eventually

ROOM = "console:group:room"
ROOM_ROUTE = json.dumps({"surface": "console", "chat_id": "room", "thread_id": None})
REPLY = "bridge › "
NOTICE = "» "


# -- helpers ---------------------------------------------------------------------------------


def policy_config(
    tmp_path: Path, base_url: str | None, policy: str = "", *, ping_pong: int | None = None
) -> Path:
    """test_cli's config plus a raw [session.send_policy] body (and [session.agent_to_agent])."""
    path = write_config(tmp_path, base_url)
    extra = ""
    if policy:
        extra += "[session.send_policy]\n" + policy.strip() + "\n"
    if ping_pong is not None:
        extra += f"[session.agent_to_agent]\nmax_ping_pong_turns = {ping_pong}\n"
    if extra:
        path.write_text(path.read_text(encoding="utf-8") + extra, encoding="utf-8")
    return path


def replace_file(path: Path, text: str) -> None:
    """Write `text` to `path` at once (a rename), so the config watcher never reads half a file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def db_file(tmp_path: Path) -> Path:
    return tmp_path / "state" / "bridge.db"


def query(db: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db, timeout=5)) as conn:
        return list(conn.execute(sql, tuple(params)).fetchall())


def active_id(db: Path, key: str) -> str:
    rows = query(db, "SELECT id FROM sessions WHERE key = ? AND ended_at IS NULL", (key,))
    assert len(rows) == 1, rows
    return str(rows[0][0])


def replies(stdout: str) -> list[str]:
    return [line.removeprefix(REPLY) for line in stdout.splitlines() if line.startswith(REPLY)]


def notices(stdout: str) -> list[str]:
    """Each notice with its continuation lines joined by newlines (the console indents them)."""
    found: list[str] = []
    for line in stdout.splitlines():
        if line.startswith(NOTICE):
            found.append(line.removeprefix(NOTICE))
        elif line.startswith("  ") and found and not line.startswith("  ⚙"):
            found[-1] += "\n" + line[2:]
    return found


def status_notices(stdout: str) -> list[str]:
    return [n for n in notices(stdout) if n.startswith("Session: ")]


def echo(request: dict[str, Any]) -> Reply:
    """A model that answers every human message with `ok: <message>`."""
    return fake.text(f"ok: {request['messages'][-1]['content']}")


async def stays_false(check: Callable[[], bool], what: str, within: float) -> None:
    """Watch `check` for `within` seconds; AssertionError as soon as it holds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert not check(), f"{what} happened"
        await asyncio.sleep(0.05)
    assert not check(), f"{what} happened"


class Console:
    """A running `bridge chat` whose stdin stays open; stdout and stderr are collected as they come."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.out: list[str] = []
        self.err: list[str] = []
        assert process.stdout is not None and process.stderr is not None
        self._readers = [
            asyncio.create_task(self._collect(process.stdout, self.out)),
            asyncio.create_task(self._collect(process.stderr, self.err)),
        ]

    @staticmethod
    async def _collect(stream: asyncio.StreamReader, sink: list[str]) -> None:
        async for raw in stream:
            sink.append(raw.decode(errors="replace").rstrip("\n"))

    @property
    def stdout(self) -> str:
        return "\n".join(self.out)

    @property
    def stderr(self) -> str:
        return "\n".join(self.err)

    def say(self, *lines: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("".join(line + "\n" for line in lines).encode())

    async def wait_stdout(self, text: str, count: int = 1, within: float = WAIT_S) -> None:
        """Wait until `text` occurs at least `count` times in stdout."""
        try:
            await eventually(lambda: self.stdout.count(text) >= count, repr(text), within)
        except AssertionError as exc:
            raise AssertionError(f"{exc} on stdout\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}") from None

    async def wait_stderr(self, text: str, count: int = 1, within: float = WAIT_S) -> None:
        try:
            await eventually(lambda: self.stderr.count(text) >= count, repr(text), within)
        except AssertionError as exc:
            raise AssertionError(f"{exc} on stderr\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}") from None

    async def status(self) -> str:
        """Send /status and return its answer (the console answers lines in order)."""
        before = len(status_notices(self.stdout))
        self.say("/status")
        await self.wait_stdout(f"{NOTICE}Session: ", before + 1)
        await self.wait_stdout("Suppressed by the send policy: ", before + 1)
        return status_notices(self.stdout)[before]

    async def kill(self) -> None:
        """Stop the process if it still runs (a failed test), and the readers with it."""
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        await asyncio.gather(*self._readers, return_exceptions=True)

    async def finish(self) -> Finished:
        """EOF on stdin, then wait for the process to exit."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), WAIT_S)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
            raise AssertionError(
                f"bridge chat did not exit\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"
            ) from None
        await asyncio.gather(*self._readers)
        assert self.process.returncode is not None
        return Finished(self.process.returncode, self.stdout + "\n", self.stderr + "\n")


@asynccontextmanager
async def console(config: Path, cwd: Path) -> AsyncIterator[Console]:
    """`bridge chat --config CONFIG`, started and past its banner (so SIGHUP is handled)."""
    process = await start_bridge(cwd, "chat", "--config", str(config), stdin=True)
    running = Console(process)
    try:
        await running.wait_stdout("Bridge chat:")
        yield running
    finally:
        await running.kill()


async def chat(config: Path, cwd: Path, *lines: str) -> Finished:
    done = await bridge("chat", "--config", str(config), cwd=cwd, lines=lines)
    assert done.code == 0, done.output
    assert_no_traceback(done)
    return done


async def seed(db: Path, fill: Callable[[SQLiteStore], Awaitable[object]]) -> None:
    """Write sessions into the bot's database before it starts."""
    store = SQLiteStore(db)
    await store.open()
    try:
        await fill(store)
        # As a bot that answered every message leaves it: the next start has nothing to take up.
        for found in await store.unanswered():
            await store.skip_unanswered(found.session.id, "seeded")
    finally:
        await store.close()


async def seed_room(store: SQLiteStore) -> SessionRow:
    meta = SessionMeta(surface="console", chat_type="group", display_name="Room", last_route=ROOM_ROUTE)
    room = await store.ensure_active_session(ROOM, meta)
    said = await store.add_user_message(room.id, "hello room", sender="console:alice")
    # Taken up by a run, as every stored message is: the next start has nothing left to answer here.
    await store.start_run("seed-run", room.id, "console", "h", said)
    await store.finish_run("seed-run", "ok")
    return room


def last_results(request: dict[str, Any]) -> list[str]:
    """The tool messages answering the request's last assistant message, in call order."""
    messages = request["messages"]
    last_call = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return [str(m["content"]) for m in messages[last_call + 1 :] if m["role"] == "tool"]


# -- the send policy on the console ------------------------------------------------------------


async def test_a_deny_rule_on_the_console_answers_in_history_but_prints_nothing(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm:
        llm.push(fake.tool_call("get_current_time", {}), fake.text("The secret answer is XYZZY."))
        config = policy_config(
            tmp_path, llm.base_url, 'rules = [{ action = "deny", match = { surface = "console" } }]'
        )
        done = await chat(config, tmp_path, "hello", "/status")

    # The model was asked and answered, tool call included...
    assert first_request_for(llm, "hello") == 0
    assert len(llm.requests) == 2
    db = db_file(tmp_path)
    main = active_id(db, "main")
    stored = query(db, "SELECT kind, content FROM messages WHERE session_id = ? ORDER BY id", (main,))
    assert [kind for kind, _ in stored] == ["user", "tool_call", "tool_result", "assistant"]
    assert stored[-1] == ("assistant", "The secret answer is XYZZY.")
    # ...but nothing of it reached the terminal, not even the tool activity; the owner's /status did.
    assert "XYZZY" not in done.stdout
    assert "get_current_time" not in done.stdout
    assert replies(done.stdout) == []
    (status,) = status_notices(done.stdout)
    assert "Suppressed by the send policy: 2" in status
    assert "Send policy: off, decided by rule 1 (deny: surface=console); shadow mode" in status
    outbox = query(
        db, "SELECT kind, text, state, reason, session_key, session_id FROM outbox WHERE kind != 'notice'"
    )
    reason = "rule 1 (deny: surface=console)"
    assert outbox == [
        ("activity", "⚙ get_current_time() ✓", "suppressed", reason, "main", main),
        ("reply", "The secret answer is XYZZY.", "suppressed", reason, "main", main),
    ]
    # The /status answer itself was sent.
    assert query(db, "SELECT state FROM outbox WHERE kind = 'notice'") == [("sent",)]


async def test_send_on_overrides_a_deny_rule_and_inherit_goes_back_to_it(tmp_path: Path) -> None:
    async with FakeOpenAI(echo) as llm:
        config = policy_config(
            tmp_path, llm.base_url, 'rules = [{ action = "deny", match = { key_prefix = "main" } }]'
        )
        done = await chat(
            config,
            tmp_path,
            "/send on",
            "first",
            "/send inherit",
            "second",
            "/send bogus",
            "/send",
            "/status",
        )

    assert [r["messages"][-1]["content"] for r in llm.requests] == ["first", "second"]
    assert replies(done.stdout) == ["ok: first"]
    said = notices(done.stdout)
    assert len(said) == 5, done.stdout
    assert said[0] == (
        "Send policy for this session: on, decided by session override (/send on); the bot speaks here."
    )
    assert said[1].startswith("Send policy for this session: off, decided by rule 1 (deny: key_prefix=main);")
    assert said[2] == (
        "Usage: /send on|off|inherit (on: speak here, off: stay silent, inherit: follow the config)."
    )
    # A bare /send shows the state without changing it.
    assert said[3].startswith("Send policy for this session: off, decided by rule 1")
    assert "Suppressed by the send policy: 1" in said[4]
    db = db_file(tmp_path)
    assert query(db, "SELECT send_policy FROM sessions WHERE key = 'main'") == [(None,)]
    assert query(db, "SELECT text, state FROM outbox WHERE kind = 'reply' ORDER BY id") == [
        ("ok: first", "sent"),
        ("ok: second", "suppressed"),
    ]


async def test_send_off_silences_the_console_and_survives_clear(tmp_path: Path) -> None:
    async with FakeOpenAI(echo) as llm:
        config = policy_config(tmp_path, llm.base_url)
        done = await chat(
            config, tmp_path, "before", "/send off", "hushed", "/clear", "after clear", "/status"
        )
        explained = await bridge(
            "policy", "explain", "main", "--surface", "console", "--config", str(config), cwd=tmp_path
        )

    assert replies(done.stdout) == ["ok: before"]
    assert [r["messages"][-1]["content"] for r in llm.requests] == ["before", "hushed", "after clear"]
    (status,) = status_notices(done.stdout)
    assert "Send policy: off, decided by session override (/send off)" in status
    assert "Messages: 2" in status  # the new session's own question and (unsent) answer
    assert "Suppressed by the send policy: 1" in status
    db = db_file(tmp_path)
    assert query(db, "SELECT send_policy FROM sessions WHERE key = 'main' ORDER BY created_at") == [
        ("deny",),
        ("deny",),
    ]
    # `bridge policy explain` reads the override the console set.
    assert explained.code == 0, explained.output
    assert "session override: deny" in explained.stdout
    assert "decision: deny, decided by session override (/send off)" in explained.stdout


async def test_an_ignore_rule_keeps_messages_from_the_model_but_commands_are_answered(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm:  # nothing scripted: any request would get a 500
        config = policy_config(
            tmp_path, llm.base_url, 'rules = [{ action = "ignore", match = { key_prefix = "main" } }]'
        )
        done = await chat(config, tmp_path, "hello", "are you there?", "/status", "/help")

    assert llm.requests == []
    assert replies(done.stdout) == []
    (status,) = status_notices(done.stdout)
    assert "Messages: 0" in status
    assert "Send policy: ignore, decided by rule 1 (ignore: key_prefix=main); the bot does not read" in status
    assert any(n.startswith("Commands:") for n in notices(done.stdout))
    assert query(db_file(tmp_path), "SELECT COUNT(*) FROM messages") == [(0,)]


# -- bridge policy explain --------------------------------------------------------------------

EXPLAIN_POLICY = """
default = "deny"
rules = [
  { action = "allow", match = { surface = "discord" } },
  { action = "deny", match = { surface = "discord", chat_type = "group" } },
  { action = "ignore", match = { key_prefix = "telegram:group:-100999" } },
  { action = "deny", match = { surface = "console" } },
]
"""


async def explain(config: Path, cwd: Path, key: str, *options: str) -> Finished:
    return await bridge("policy", "explain", key, *options, "--config", str(config), cwd=cwd)


def decision(done: Finished) -> str:
    assert done.code == 0, done.output
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("decision: ")]
    return line


async def test_policy_explain_names_the_rule_that_decides(tmp_path: Path) -> None:
    config = policy_config(tmp_path, None, EXPLAIN_POLICY)

    async def seeded(store: SQLiteStore) -> None:
        group = await store.ensure_active_session("discord:group:2", SessionMeta(surface="discord"))
        await store.set_send_policy(group.id, "allow")

    await seed(db_file(tmp_path), seeded)
    keys: list[tuple[str, ...]] = [
        ("discord:group:2",),
        ("discord:group:1",),
        ("discord:channel:1",),
        ("discord:dm:5",),
        ("telegram:dm:5",),
        ("telegram:group:-100999",),
        ("main", "--surface", "console"),
        ("main",),
    ]
    runs = await asyncio.gather(*(explain(config, tmp_path, *key) for key in keys))
    found = {" ".join(key): run for key, run in zip(keys, runs, strict=True)}

    override = found["discord:group:2"]
    assert "session override: allow" in override.stdout
    assert "  rule 2 (deny: surface=discord, chat_type=group): matches" in override.stdout
    assert decision(override) == "decision: allow, decided by session override (/send on)"
    # A later matching deny wins over an earlier matching allow, and the explanation says why.
    group = found["discord:group:1"]
    assert decision(group) == "decision: deny, decided by rule 2 (deny: surface=discord, chat_type=group)"
    assert "note: a matching deny or ignore wins over any allow" in group.stdout
    assert "(no active session with this key in the database yet)" in group.stdout
    # chat_type "group" covers Discord channels too.
    channel = found["discord:channel:1"]
    assert "chat type: channel" in channel.stdout
    assert decision(channel) == "decision: deny, decided by rule 2 (deny: surface=discord, chat_type=group)"
    assert decision(found["discord:dm:5"]) == "decision: allow, decided by rule 1 (allow: surface=discord)"
    assert decision(found["telegram:dm:5"]) == "decision: deny, decided by default (deny)"
    ignored = found["telegram:group:-100999"]
    assert (
        decision(ignored) == "decision: ignore, decided by rule 3 (ignore: key_prefix=telegram:group:-100999)"
    )
    assert "does not read this chat at all" in ignored.stdout
    # `main` spans surfaces: --surface picks the one to decide for.
    on_console = found["main --surface console"]
    assert "surface: console" in on_console.stdout and "chat type: dm" in on_console.stdout
    assert decision(on_console) == "decision: deny, decided by rule 4 (deny: surface=console)"
    anywhere = found["main"]
    assert "surface: any (not known for this key)" in anywhere.stdout
    assert decision(anywhere) == "decision: deny, decided by default (deny)"
    for done in runs:
        assert_no_traceback(done)


async def test_policy_explain_of_a_bad_key_exits_2_and_creates_no_database(tmp_path: Path) -> None:
    config = policy_config(tmp_path, None, EXPLAIN_POLICY)
    bad, good = await asyncio.gather(
        explain(config, tmp_path, "telegram:group"), explain(config, tmp_path, "telegram:dm:5")
    )
    assert bad.code == 2, bad.output
    assert "'telegram:group'" in bad.stderr and "invalid session key" in bad.stderr
    assert bad.stdout == ""
    assert_no_traceback(bad)
    # A valid key with no database answers from the config alone, and leaves no database behind.
    assert decision(good) == "decision: deny, decided by default (deny)"
    assert not (tmp_path / "state").exists()


# -- session tools through the console --------------------------------------------------------


async def test_sessions_list_filters_by_kind_limit_and_activity_and_caps_messages(tmp_path: Path) -> None:
    db = db_file(tmp_path)

    async def sessions(store: SQLiteStore) -> None:
        room = await seed_room(store)
        await store.start_run("r1", room.id, "console", "h")
        for i in range(12):
            await store.add_user_message(room.id, f"q{i}")
            await store.add_assistant_message(room.id, None, f"a{i}")
        await store.add_tool_exchange(
            room.id, "r1", ToolExchange("c1", "get_current_time", "{}", "TOOL-RESULT", "success", 1)
        )
        await store.ensure_active_session("telegram:dm:7", SessionMeta(surface="telegram", chat_type="dm"))
        await store.ensure_active_session("cron:daily")

    await seed(db, sessions)
    # telegram:dm:7 was last active an hour ago.
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE sessions SET updated_at = ? WHERE key = 'telegram:dm:7'", (time.time() - 3600,))

    async with FakeOpenAI() as llm:
        llm.push(
            fake.tool_call("load_tool_group", {"group_name": "sessions"}),
            fake.tool_calls(
                fake.tool_call("sessions_list", {"kinds": ["group"], "message_limit": 50}),
                fake.tool_call("sessions_list", {"limit": 1}),
                fake.tool_call("sessions_list", {"active_minutes": 5}),
                fake.tool_call("sessions_list", {}),
                fake.tool_call("sessions_list", {"kinds": ["nope"]}),
            ),
            fake.text("Listed."),
        )
        config = policy_config(tmp_path, llm.base_url)
        done = await chat(config, tmp_path, "list my sessions")

    assert replies(done.stdout) == ["Listed."]
    assert sum("sessions_list(" in line for line in done.stdout.splitlines() if line.startswith("  ⚙")) == 5
    contents = last_results(llm.requests[2])
    groups, newest, recent, everything = (json.loads(c) for c in contents[:4])
    assert contents[4].startswith("Error [invalid_arguments]")

    (room,) = groups["sessions"]
    assert groups["count"] == 1
    assert room["key"] == ROOM and room["kind"] == "group" and room["provider"] == "console"
    assert room["display_name"] == "Room" and room["message_count"] == 27
    # message_limit 50 is capped at 20, and only chat messages are shown (no tool call or result).
    assert len(room["messages"]) == 20
    assert {m["role"] for m in room["messages"]} == {"user", "assistant"}
    assert room["messages"][-1]["content"] == "a11"
    assert "TOOL-RESULT" not in contents[0]

    assert [s["key"] for s in newest["sessions"]] == ["main"]
    assert "messages" not in newest["sessions"][0]
    assert {s["key"] for s in recent["sessions"]} == {"main", ROOM, "cron:daily"}
    assert {s["key"]: s["kind"] for s in everything["sessions"]} == {
        "main": "main",
        ROOM: "group",
        "telegram:dm:7": "other",
        "cron:daily": "cron",
    }


async def test_sessions_history_reads_by_key_and_by_id_with_and_without_tools(tmp_path: Path) -> None:
    db = db_file(tmp_path)
    ids: dict[str, str] = {}

    async def sessions(store: SQLiteStore) -> None:
        old = await seed_room(store)
        await store.start_run("r1", old.id, "console", "h")
        await store.add_tool_exchange(
            old.id, "r1", ToolExchange("c1", "get_current_time", "{}", "12:00 UTC", "success", 1)
        )
        await store.add_assistant_message(old.id, "r1", "It is noon.")
        await store.add_user_message(old.id, "thanks")
        new = await store.start_new_session(ROOM)
        await store.add_user_message(new.id, "a fresh start")
        ids.update(old=old.id, new=new.id)

    await seed(db, sessions)
    async with FakeOpenAI() as llm:
        llm.push(
            fake.tool_call("load_tool_group", {"group_name": "sessions"}),
            fake.tool_calls(
                fake.tool_call("sessions_history", {"session_key": ROOM}),
                fake.tool_call("sessions_history", {"session_key": ids["old"], "include_tools": False}),
                fake.tool_call("sessions_history", {"session_key": ids["old"], "include_tools": True}),
                fake.tool_call(
                    "sessions_history", {"session_key": ids["old"], "include_tools": True, "limit": 2}
                ),
                fake.tool_call("sessions_history", {"session_key": "console:group:nowhere"}),
            ),
            fake.text("Read."),
        )
        config = policy_config(tmp_path, llm.base_url)
        done = await chat(config, tmp_path, "read the room")

    assert replies(done.stdout) == ["Read."]
    contents = last_results(llm.requests[2])
    by_key, chat_only, with_tools, last_two = (json.loads(c) for c in contents[:4])
    assert contents[4].startswith("Error [not_found]")

    # By key: the key's active session.
    assert by_key["session_id"] == ids["new"] and by_key["session_key"] == ROOM
    assert [m["content"] for m in by_key["messages"]] == ["a fresh start"]
    # By id: that session, even though it has ended.
    assert chat_only["session_id"] == ids["old"]
    assert [(m["role"], m["content"]) for m in chat_only["messages"]] == [
        ("user", "hello room"),
        ("assistant", "It is noon."),
        ("user", "thanks"),
    ]
    assert [m["role"] for m in with_tools["messages"]] == ["user", "tool_call", "tool", "assistant", "user"]
    call, result = with_tools["messages"][1:3]
    assert call["tool_name"] == "get_current_time" and call["input"] == "{}"
    assert result["content"] == "12:00 UTC" and result["status"] == "success"
    assert [m["content"] for m in last_two["messages"]] == ["It is noon.", "thanks"]


# -- sessions_send through the console --------------------------------------------------------


async def seed_room_only(store: SQLiteStore) -> None:
    await seed_room(store)


def a2a_model(**kwargs: Any) -> AgentToAgentModel:
    args = {"session_key": ROOM, "message": "status?", "timeout_seconds": 10, **kwargs.pop("send", {})}
    return AgentToAgentModel(send_args=args, **kwargs)


def send_result(script: AgentToAgentModel) -> dict[str, Any]:
    (result,) = script.seen["send_result"]
    return dict(json.loads(result))


def room_rows(db: Path) -> list[tuple[str, str, str | None]]:
    return query(
        db,
        "SELECT kind, content, via_session FROM messages WHERE session_id = ? ORDER BY id",
        (active_id(db, ROOM),),
    )


async def test_sessions_send_returns_the_reply_and_the_announce_is_printed(tmp_path: Path) -> None:
    script = a2a_model(
        announce="Main asked for a status; all quiet.",
        requester_turns=deque(["anything else?", "REPLY_SKIP"]),
        target_turns=deque(["nothing else"]),
    )
    await seed(db_file(tmp_path), seed_room_only)
    async with FakeOpenAI(script) as llm:
        config = policy_config(tmp_path, llm.base_url)
        async with console(config, tmp_path) as bot:
            bot.say("ask the other chat")
            await bot.wait_stdout(f"{REPLY}Main asked for a status; all quiet.")
            announced = await eventually(
                lambda: query(
                    db_file(tmp_path),
                    "SELECT state, session_key FROM outbox "
                    "WHERE dedupe_key LIKE 'announce:%' AND state != 'pending'",
                ),
                "the announce to be marked as handed over",
            )
            done = await bot.finish()
    assert done.code == 0, done.output
    assert_no_traceback(done)

    result = send_result(script)
    assert result["status"] == "ok" and result["reply"] == "All quiet here." and result["run_id"]
    # requester → target → requester (REPLY_SKIP): three reply-back turns, then one announce.
    assert len(script.seen["reply"]) == 3
    assert len(script.seen["announce"]) == 1
    printed = replies(done.stdout)
    assert printed[0].startswith("Relayed: ") and "All quiet here." in printed[0]
    assert printed[1:] == ["Main asked for a status; all quiet."]
    # Only the announce reached the chat: the exchange itself went agent to agent.
    for private in ("anything else?", "nothing else"):
        assert private not in done.stdout
    rows = room_rows(db_file(tmp_path))
    assert ("user", "hello room", None) in rows
    injected = [row for row in rows if row[2] is not None]
    assert injected[0][1].startswith("status?") and injected[0][2] == "main"
    assert announced == [("sent", ROOM)]


async def test_sessions_send_with_timeout_zero_is_accepted_and_runs_on(tmp_path: Path) -> None:
    script = a2a_model(send={"timeout_seconds": 0}, target_delay_s=0.3, announce="Done in the background.")
    await seed(db_file(tmp_path), seed_room_only)
    async with FakeOpenAI(script) as llm:
        config = policy_config(tmp_path, llm.base_url, ping_pong=0)
        async with console(config, tmp_path) as bot:
            bot.say("ask the other chat")
            await bot.wait_stdout(f"{REPLY}Done in the background.")
            done = await bot.finish()

    result = send_result(script)
    assert set(result) == {"run_id", "status"}
    assert result["status"] == "accepted" and result["run_id"]
    run = query(db_file(tmp_path), "SELECT status, channel FROM runs WHERE id = ?", (result["run_id"],))
    assert run == [("ok", "agent")]
    assert replies(done.stdout)[-1] == "Done in the background."


async def test_sessions_send_to_a_slow_target_times_out_and_the_run_continues(tmp_path: Path) -> None:
    script = a2a_model(send={"timeout_seconds": 0.3}, target_delay_s=1.5, announce="Late, but here.")
    await seed(db_file(tmp_path), seed_room_only)
    async with FakeOpenAI(script) as llm:
        config = policy_config(tmp_path, llm.base_url, ping_pong=0)
        async with console(config, tmp_path) as bot:
            bot.say("ask the other chat")
            await bot.wait_stdout(f"{REPLY}Late, but here.")
            done = await bot.finish()

    result = send_result(script)
    assert result["status"] == "timeout"
    assert f"sessions_history('{ROOM}')" in result["error"]
    run = query(db_file(tmp_path), "SELECT status FROM runs WHERE id = ?", (result["run_id"],))
    assert run == [("ok",)]
    assert ("assistant", "All quiet here.", None) in room_rows(db_file(tmp_path))
    assert replies(done.stdout)[0].startswith("Relayed: ")


async def test_announce_skip_prints_nothing_in_the_target_chat(tmp_path: Path) -> None:
    script = a2a_model(announce="ANNOUNCE_SKIP")
    db = db_file(tmp_path)
    await seed(db, seed_room_only)
    async with FakeOpenAI(script) as llm:
        config = policy_config(tmp_path, llm.base_url)
        async with console(config, tmp_path) as bot:
            bot.say("ask the other chat")
            await bot.wait_stdout(f"{REPLY}Relayed: ")
            # The announce turn has been answered and its run finished...
            await eventually(
                lambda: (
                    query(
                        db,
                        "SELECT 1 FROM runs WHERE session_id = ? AND status = 'running'",
                        (active_id(db, ROOM),),
                    )
                    == []
                    and ("assistant", "ANNOUNCE_SKIP", None) in room_rows(db)
                ),
                "the announce turn to finish",
            )
            # ...and a command answered after it shows the chat stayed silent.
            await bot.status()
            done = await bot.finish()

    assert script.seen["announce"]
    assert [r for r in replies(done.stdout) if not r.startswith("Relayed: ")] == []
    assert "ANNOUNCE_SKIP" not in done.stdout
    assert query(db, "SELECT COUNT(*) FROM outbox WHERE dedupe_key LIKE 'announce:%'") == [(0,)]


async def test_an_announce_into_a_denied_session_is_suppressed_not_printed(tmp_path: Path) -> None:
    script = a2a_model(
        announce="LEAK: everything main said",
        requester_turns=deque(["say it in the chat!"]),
        target_turns=deque(["LEAK 1"]),
    )
    db = db_file(tmp_path)
    await seed(db, seed_room_only)
    async with FakeOpenAI(script) as llm:
        config = policy_config(
            tmp_path, llm.base_url, f'rules = [{{ action = "deny", match = {{ key_prefix = "{ROOM}" }} }}]'
        )
        async with console(config, tmp_path) as bot:
            bot.say("ask the other chat")
            await bot.wait_stdout(f"{REPLY}Relayed: ")
            rows = await eventually(
                lambda: query(
                    db,
                    "SELECT text, state, reason, session_key FROM outbox WHERE dedupe_key LIKE 'announce:%'",
                ),
                "the announce in the outbox",
            )
            await bot.status()
            done = await bot.finish()

    assert send_result(script)["status"] == "ok"
    # The ping-pong ran (the target's "LEAK 1" went back to main's agent), then the announce.
    assert len(script.seen["reply"]) == 3
    assert rows == [
        ("LEAK: everything main said", "suppressed", f"rule 1 (deny: key_prefix={ROOM})", ROOM),
    ]
    assert "LEAK" not in done.stdout
    # The console's own session is not denied: main's answer was printed.
    assert replies(done.stdout)[0].startswith("Relayed: ")


async def test_sessions_send_to_main_itself_is_refused(tmp_path: Path) -> None:
    script = a2a_model(send={"session_key": "main"})
    await seed(db_file(tmp_path), seed_room_only)
    async with FakeOpenAI(script) as llm:
        config = policy_config(tmp_path, llm.base_url)
        done = await chat(config, tmp_path, "ask the other chat")

    (result,) = script.seen["send_result"]
    assert result.startswith("Error [same_session]")
    assert "request" not in script.seen
    assert any("sessions_send(" in line and "✗ same_session" in line for line in done.stdout.splitlines())
    assert [row for row in room_rows(db_file(tmp_path)) if row[2] is not None] == []


# -- live reload ------------------------------------------------------------------------------

DENY_MAIN = '[session.send_policy]\nrules = [{ action = "deny", match = { key_prefix = "main" } }]\n'


async def test_config_edits_and_sighup_reload_the_send_policy_while_chatting(tmp_path: Path) -> None:
    async with FakeOpenAI(echo) as llm:
        config = policy_config(tmp_path, llm.base_url)
        base = config.read_text(encoding="utf-8")
        async with console(config, tmp_path) as bot:
            bot.say("one")
            await bot.wait_stdout(f"{REPLY}ok: one")

            # An edit that denies main applies without a restart; other changed keys wait for one.
            replace_file(config, base + DENY_MAIN + "[agent]\nmax_iterations = 5\n")
            await bot.wait_stderr("config reloaded")
            await bot.wait_stderr("these changed settings apply after a restart: agent.max_iterations")
            bot.say("two")
            status = await bot.status()
            assert "Send policy: off, decided by rule 1 (deny: key_prefix=main)" in status
            assert "Suppressed by the send policy: 1" in status
            assert f"{REPLY}ok: two" not in bot.stdout

            # An invalid edit is reported once, by key, and the last good policy stays.
            replace_file(config, base + DENY_MAIN + 'default = "maybe"\n[agent]\nmax_iterations = 5\n')
            await bot.wait_stderr("config reload failed")
            bot.say("three")
            status = await bot.status()
            assert "Send policy: off, decided by rule 1 (deny: key_prefix=main)" in status
            assert f"{REPLY}ok: three" not in bot.stdout
            # Over several watch intervals the same broken file is not reported again.
            await stays_false(
                lambda: bot.stderr.count("config reload failed") > 1, "a second reload error", 2.5
            )
            errors = [line for line in bot.err if " ERROR " in line]
            assert len(errors) == 1, bot.stderr
            assert bot.stderr.count("session.send_policy.default") == 1, bot.stderr
            assert bot.stderr.count("config reloaded") == 1

            # Fixed: the deny rule is gone again.
            replace_file(config, base)
            await bot.wait_stderr("config reloaded", count=2)
            bot.say("four")
            await bot.wait_stdout(f"{REPLY}ok: four")

            # SIGHUP reloads the unchanged file, and the bot keeps answering.
            bot.process.send_signal(signal.SIGHUP)
            await bot.wait_stderr("config reloaded", count=3)
            bot.say("five")
            await bot.wait_stdout(f"{REPLY}ok: five")
            done = await bot.finish()

    assert done.code == 0, done.output
    assert_no_traceback(done)
    assert replies(done.stdout) == ["ok: one", "ok: four", "ok: five"]
    assert [r["messages"][-1]["content"] for r in llm.requests] == ["one", "two", "three", "four", "five"]


def has_open(pid: int, path: Path) -> bool:
    """Whether process `pid` holds `path` open (Linux /proc)."""
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


async def test_a_config_edit_saved_while_the_bot_starts_up_is_applied(tmp_path: Path) -> None:
    async with FakeOpenAI(echo) as llm:
        config = policy_config(tmp_path, llm.base_url)
        base = config.read_text(encoding="utf-8")
        db = db_file(tmp_path)
        db.parent.mkdir(parents=True)
        # Hold the database so the bot stops in its startup after it has read the config.
        with closing(sqlite3.connect(db, isolation_level=None)) as lock:
            lock.execute("BEGIN EXCLUSIVE")
            process = await start_bridge(tmp_path, "chat", "--config", str(config), stdin=True)
            bot = Console(process)
            try:
                await eventually(lambda: has_open(process.pid, db), "bridge to open its database")
                assert "Bridge chat:" not in bot.stdout
                replace_file(config, base + DENY_MAIN)
                lock.execute("COMMIT")
                await bot.wait_stdout("Bridge chat:")
                # Within a few watch intervals the saved file is what the bot follows.
                deadline = time.monotonic() + 5
                status = await bot.status()
                while "Send policy: off" not in status and time.monotonic() < deadline:
                    await asyncio.sleep(0.25)
                    status = await bot.status()
                assert "Send policy: off, decided by rule 1 (deny: key_prefix=main)" in status, bot.stderr
                bot.say("hello")
                await bot.status()
                done = await bot.finish()
            finally:
                await bot.kill()
    assert replies(done.stdout) == []
