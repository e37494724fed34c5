"""The `bridge` console script end to end, as a subprocess, against a fake model server."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.localmodel import DEFAULT_MODEL, MODEL_ALIAS, process_start
from devkit.fakes import openai_server as fake_replies
from devkit.fakes.loopback import closed_port
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.scripted_model import HistoryTrustingModel
from devkit.processes import start_bridge
from tests.corruption import damage

CORE_TOOLS = ["load_tool_group", "get_current_time", "search_history", "save_memory"]
SECRET = "sk-cli-test-NEVER-SHOWN-7731"
PROCESS_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Finished:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


async def bridge(*args: str, cwd: Path, lines: tuple[str, ...] = (), **env: str) -> Finished:
    """Run `bridge ARGS` with `lines` piped to stdin (then EOF) and wait for it to exit."""
    process = await start_bridge(cwd, *args, stdin=True, **env)
    stdin = "".join(line + "\n" for line in lines).encode()
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(stdin), PROCESS_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        stdout, stderr = await process.communicate()
        raise AssertionError(
            f"bridge {' '.join(args)} did not exit within {PROCESS_TIMEOUT_S} s\n"
            f"stdout:\n{stdout.decode(errors='replace')}\nstderr:\n{stderr.decode(errors='replace')}"
        ) from None
    assert process.returncode is not None
    return Finished(process.returncode, stdout.decode(), stderr.decode())


def write_config(tmp_path: Path, base_url: str | None, **llm: Any) -> Path:
    """A config whose state lives in tmp_path; `llm` adds [llm] keys."""
    lines = ["[llm]"]
    if base_url is not None:
        lines.append(f"base_url = {json.dumps(base_url)}")
    lines += [f"{key} = {json.dumps(value)}" for key, value in llm.items()]
    lines += [
        "[storage]",
        f"path = {json.dumps((tmp_path / 'state' / 'bridge.db').as_posix())}",
        "[tools]",
        f"workspace = {json.dumps((tmp_path / 'workspace').as_posix())}",
    ]
    path = tmp_path / "bridge.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def first_request_for(fake: FakeOpenAI, user_text: str) -> int:
    """Index of the first request whose last message is the user's `user_text`."""
    for i, request in enumerate(fake.requests):
        last = request["messages"][-1]
        if last["role"] == "user" and last.get("content") == user_text:
            return i
    raise AssertionError(f"no request ends with the user message {user_text!r}")


def tool_contents(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content", "")) for m in request["messages"] if m["role"] == "tool"]


def assert_no_traceback(done: Finished) -> None:
    assert "Traceback" not in done.stdout, done.stdout
    assert "Traceback" not in done.stderr, done.stderr


# -- check-config ----------------------------------------------------------------------------


async def test_check_config_prints_the_effective_config_and_redacts_the_key(tmp_path: Path) -> None:
    config = write_config(tmp_path, "http://127.0.0.1:8080/v1", model="local-model")
    done = await bridge("check-config", "--config", str(config), cwd=tmp_path, BRIDGE_LLM__API_KEY=SECRET)
    assert done.code == 0, done.output
    assert SECRET not in done.output
    assert 'api_key = "<redacted>"' in done.stdout
    assert str(config) in done.stdout.splitlines()[0]
    # The printout is itself valid TOML with the effective values.
    effective = tomllib.loads(done.stdout)
    assert effective["llm"]["base_url"] == "http://127.0.0.1:8080/v1"
    assert effective["llm"]["model"] == "local-model"
    assert effective["storage"]["path"] == (tmp_path / "state" / "bridge.db").as_posix()
    assert effective["tools"]["allow_private_network"] is False
    # The verdict, last, where a glance or a script finds it.
    assert done.stdout.splitlines()[-1] == "# the config is valid"
    assert_no_traceback(done)


async def test_check_config_uses_config_toml_in_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[llm]\nmodel = "cwd-model"\n', encoding="utf-8")
    done = await bridge("check-config", cwd=tmp_path, BRIDGE_TOOLS__ALLOW_PRIVATE_NETWORK="true")
    assert done.code == 0, done.output
    effective = tomllib.loads(done.stdout)
    assert effective["llm"]["model"] == "cwd-model"
    assert effective["tools"]["allow_private_network"] is True


async def test_check_config_rejects_an_unknown_key_without_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[storage]\npth = "data/x.db"\n', encoding="utf-8")
    done = await bridge("check-config", "--config", str(config), cwd=tmp_path)
    assert done.code != 0
    assert "storage.pth" in done.stderr
    assert "unknown key" in done.stderr
    assert_no_traceback(done)


async def test_check_config_with_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    done = await bridge("check-config", "--config", "nope.toml", cwd=tmp_path)
    assert done.code != 0
    assert "nope.toml" in done.stderr
    assert "not found" in done.stderr
    assert_no_traceback(done)


async def test_check_config_with_a_non_json_list_in_the_environment(tmp_path: Path) -> None:
    done = await bridge("check-config", cwd=tmp_path, BRIDGE_OWNERS="telegram:42")
    assert done.code != 0
    assert "BRIDGE_OWNERS" in done.stderr
    assert "JSON" in done.stderr
    assert_no_traceback(done)


# -- chat, end to end ------------------------------------------------------------------------


async def test_chat_keeps_loaded_groups_across_turns_and_resets_them_on_clear(tmp_path: Path) -> None:
    model = HistoryTrustingModel()
    async with FakeOpenAI(model) as fake:
        config = write_config(tmp_path, fake.base_url)
        done = await bridge(
            "chat",
            "--config",
            str(config),
            cwd=tmp_path,
            lines=("show my sessions", "show my sessions again", "/clear", "list sessions now"),
        )
    assert done.code == 0, done.output
    assert_no_traceback(done)

    # Turn 1: core tools only, and the prompt lists the groups to load.
    turn1 = first_request_for(fake, "show my sessions")
    assert turn1 == 0
    assert fake.tool_names(turn1) == CORE_TOOLS
    system = fake.requests[turn1]["messages"][0]
    assert system["role"] == "system"
    assert "## Available Tool Groups" in system["content"]
    assert "- sessions" in system["content"]

    # Turn 2: the group loaded in turn 1 is offered from the very first request.
    turn2 = first_request_for(fake, "show my sessions again")
    assert turn2 > turn1
    assert {"sessions_list", "sessions_history"} <= set(fake.tool_names(turn2))
    assert set(CORE_TOOLS) <= set(fake.tool_names(turn2))

    # Nothing the model called was refused, in any turn.
    for request in fake.requests:
        for content in tool_contents(request):
            for bad in ("not loaded", "not available", "Error"):
                assert bad not in content, content
    assert model.seen_errors == []

    # After /clear: a fresh session, core tools only, no history.
    turn3 = first_request_for(fake, "list sessions now")
    assert turn3 > turn2
    assert fake.tool_names(turn3) == CORE_TOOLS
    assert [m["role"] for m in fake.requests[turn3]["messages"]] == ["system", "user"]
    assert "(loaded)" not in fake.requests[turn3]["messages"][0]["content"]

    # The terminal shows tool activity apart from the replies, and the /clear notice.
    lines = done.stdout.splitlines()
    activity = [line for line in lines if line.startswith("  ⚙")]
    replies = [line for line in lines if line.startswith("bridge ›")]
    assert any("load_tool_group" in line and "✓" in line for line in activity), done.stdout
    assert any("sessions_list" in line and "✓" in line for line in activity), done.stdout
    assert not any(line.startswith("bridge ›") for line in activity)
    assert len(replies) == 3, done.stdout
    assert all("⚙" not in line for line in replies)
    assert any(line.startswith("» Started a new session") for line in lines), done.stdout


async def test_chat_sends_history_as_structured_messages(tmp_path: Path) -> None:
    async with FakeOpenAI(HistoryTrustingModel()) as fake:
        config = write_config(tmp_path, fake.base_url)
        done = await bridge(
            "chat",
            "--config",
            str(config),
            cwd=tmp_path,
            lines=("show my sessions", "show my sessions again"),
        )
    assert done.code == 0, done.output

    messages = fake.requests[first_request_for(fake, "show my sessions again")]["messages"]
    assert messages[-1] == {"role": "user", "content": "show my sessions again"}
    assert messages[1] == {"role": "user", "content": "show my sessions"}
    calls = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
    results = [m for m in messages if m["role"] == "tool"]
    assert [c["tool_calls"][0]["function"]["name"] for c in calls] == ["load_tool_group", "sessions_list"]
    assert json.loads(calls[0]["tool_calls"][0]["function"]["arguments"]) == {"group_name": "sessions"}
    # Every result answers a call that precedes it, by id.
    call_ids = [call["id"] for c in calls for call in c["tool_calls"]]
    assert [r["tool_call_id"] for r in results] == call_ids
    assert "sessions_list" in results[0]["content"]
    # Turn 1's final answer is its own assistant message, not text pasted into the user's.
    plain = [m for m in messages if m["role"] == "assistant" and not m.get("tool_calls")]
    assert len(plain) == 1 and plain[0]["content"].startswith("Done:")
    user_texts = [m["content"] for m in messages if m["role"] == "user"]
    assert user_texts == ["show my sessions", "show my sessions again"]


async def test_status_shows_session_groups_and_message_count(tmp_path: Path) -> None:
    async with FakeOpenAI(HistoryTrustingModel()) as fake:
        config = write_config(tmp_path, fake.base_url)
        done = await bridge(
            "chat", "--config", str(config), cwd=tmp_path, lines=("/status", "show my sessions", "/status")
        )
    assert done.code == 0, done.output
    assert_no_traceback(done)

    with sqlite3.connect(tmp_path / "state" / "bridge.db") as db:
        ((session_id,),) = db.execute("SELECT id FROM sessions WHERE ended_at IS NULL").fetchall()
        (count,) = db.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)).fetchone()
    assert count > 0

    first, second = done.stdout.split("» Session: ")[1:3]
    assert first.startswith(session_id) and second.startswith(session_id)
    assert "Messages: 0" in first
    assert "Loaded tool groups: none" in first
    assert f"Messages: {count}" in second
    assert "Loaded tool groups: sessions" in second


async def test_chat_with_an_unreachable_model_server_stays_usable(tmp_path: Path) -> None:
    port = closed_port()
    config = write_config(tmp_path, f"http://127.0.0.1:{port}/v1", max_retries=0, timeout_s=5)
    done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("hello", "are you there?"))
    assert done.code == 0, done.output
    assert_no_traceback(done)
    errors = [line for line in done.stdout.splitlines() if "Can't reach the model server" in line]
    assert len(errors) == 2, done.output
    assert all(f"127.0.0.1:{port}" in line for line in errors)


async def test_chat_without_a_model_says_to_set_base_url(tmp_path: Path) -> None:
    config = write_config(tmp_path, None)
    done = await bridge(
        "chat",
        "--config",
        str(config),
        cwd=tmp_path,
        lines=("hello",),
        BRIDGE_LOCAL_MODEL_DIR=str(tmp_path / "no-local-model"),
    )
    assert done.code != 0
    assert "[llm] base_url" in done.stderr and "bridge local-model start" in done.stderr
    assert_no_traceback(done)


async def test_chat_without_base_url_uses_the_running_local_model_and_says_so_first(tmp_path: Path) -> None:
    async with FakeOpenAI(lambda body: fake_replies.text("hello from the local model")) as fake:
        cache = tmp_path / "local-model"
        cache.mkdir()
        port = int(fake.base_url.rsplit(":", 1)[1].split("/")[0])
        # What `bridge local-model start` leaves behind; this test process stands in for the server.
        state = {"pid": os.getpid(), "port": port, "mode": "text", "started": process_start(os.getpid())}
        (cache / "server.json").write_text(json.dumps(state))
        config = write_config(tmp_path, None)
        done = await bridge(
            "chat", "--config", str(config), cwd=tmp_path, lines=("hi",), BRIDGE_LOCAL_MODEL_DIR=str(cache)
        )
    assert done.code == 0, done.output
    first = done.stdout.splitlines()[0]
    assert f"Using the local model {DEFAULT_MODEL} at http://127.0.0.1:{port}/v1 (text tool calls)" in first
    assert "hello from the local model" in done.stdout
    [request] = fake.requests
    assert request["model"] == MODEL_ALIAS and "tools" not in request


async def test_local_model_status_says_when_nothing_runs(tmp_path: Path) -> None:
    done = await bridge("local-model", "status", cwd=tmp_path, BRIDGE_LOCAL_MODEL_DIR=str(tmp_path))
    assert done.code == 1 and "not running" in done.stdout
    stale = {"pid": 2**22 + 12345, "port": 1, "mode": "native"}  # no such process
    (tmp_path / "server.json").write_text(json.dumps(stale))
    done = await bridge("local-model", "status", cwd=tmp_path, BRIDGE_LOCAL_MODEL_DIR=str(tmp_path))
    assert done.code == 1 and "not running" in done.stdout


async def test_backup_copies_the_database_and_refuses_to_overwrite(tmp_path: Path) -> None:
    async with FakeOpenAI(HistoryTrustingModel()) as fake:
        config = write_config(tmp_path, fake.base_url)
        done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("hello",))
    assert done.code == 0, done.output
    target = tmp_path / "backups" / "bridge-copy.db"
    done = await bridge("backup", str(target), "--config", str(config), cwd=tmp_path)
    assert done.code == 0, done.output
    assert str(target) in done.stdout
    with sqlite3.connect(target) as db:
        contents = [row[0] for row in db.execute("SELECT content FROM messages WHERE kind = 'user'")]
    assert contents == ["hello"]
    again = await bridge("backup", str(target), "--config", str(config), cwd=tmp_path)
    assert again.code != 0 and "already exists; choose a new file for the backup" in again.stderr
    assert_no_traceback(again)


async def test_a_damaged_database_stops_the_bot_with_a_clear_message(tmp_path: Path) -> None:
    async with FakeOpenAI(HistoryTrustingModel()) as fake:
        config = write_config(tmp_path, fake.base_url)
        lines = tuple(f"message {i} " + "x" * 300 for i in range(150))
        done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=lines)
        assert done.code == 0, done.output
        db = tmp_path / "state" / "bridge.db"
        before = damage(db)
        done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("hello",))
    assert done.code == 1
    assert "is damaged and was left untouched" in done.stderr
    assert done.stderr.rstrip().endswith("or move the file away to start with an empty database")
    assert_no_traceback(done)
    assert db.read_bytes() == before


async def test_runs_lists_runs_and_trace_prints_one(tmp_path: Path) -> None:
    async with FakeOpenAI(HistoryTrustingModel()) as fake:
        config = write_config(tmp_path, fake.base_url)
        done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("what time is it", "hello"))
    assert done.code == 0, done.output
    listed = await bridge("runs", "--session", "main", "--config", str(config), cwd=tmp_path)
    assert listed.code == 0, listed.output
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:2] == ["run", "id"]
    assert len(rows) == 2 and all(row.split()[3] == "ok" and row.endswith("main") for row in rows)
    newest_last = rows[-1].split()[0]  # newest first: the last row is the time question
    shown = await bridge("trace", newest_last, "--config", str(config), cwd=tmp_path)
    assert shown.code == 0, shown.output
    assert "tool get_current_time: success" in shown.stdout and "status ok" in shown.stdout
    raw = await bridge("trace", newest_last, "--json", "--config", str(config), cwd=tmp_path)
    assert json.loads(raw.stdout)["run_id"] == newest_last
    missing = await bridge("trace", "nope", "--config", str(config), cwd=tmp_path)
    assert missing.code == 1 and "no run with id 'nope'" in missing.stderr
    other = await bridge("runs", "--session", "telegram:dm:1", "--config", str(config), cwd=tmp_path)
    assert "(no runs)" in other.stdout


async def test_runs_without_a_database_says_so_and_creates_none(tmp_path: Path) -> None:
    config = write_config(tmp_path, None)
    done = await bridge("runs", "--config", str(config), cwd=tmp_path)
    assert done.code == 1 and "no database at" in done.stderr
    assert not (tmp_path / "state").exists()
    assert_no_traceback(done)


async def test_status_on_sqlite_lists_no_process_after_a_clean_stop_and_needs_a_database(
    tmp_path: Path,
) -> None:
    async with FakeOpenAI(HistoryTrustingModel()) as fake:
        config = write_config(tmp_path, fake.base_url)
        missing = await bridge("status", "--config", str(config), cwd=tmp_path)
        assert missing.code == 1 and "no database at" in missing.stderr
        done = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("hello",))
        assert done.code == 0, done.output
        listed = await bridge("status", "--config", str(config), cwd=tmp_path)
    assert listed.code == 0, listed.output
    assert listed.stdout.splitlines()[0] == f"database: {tmp_path / 'state' / 'bridge.db'}"
    assert "(no Bridge process is running on this database)" in listed.stdout
