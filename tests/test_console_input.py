"""What `bridge chat` reads: edited lines and history on a terminal, any bytes from a pipe."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import io
import json
import os
import pty
import struct
import termios
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from adapters.console import ConsoleAdapter
from bridge.errors import IntakeUnavailable
from bridge.events import Inbound, Outbound, OutFile, Route
from bridge.localmodel import process_start
from devkit.fakes import openai_server as fake_replies
from devkit.fakes.openai_server import FakeOpenAI
from devkit.processes import bridge_command, bridge_env, start_bridge
from tests.test_cli import write_config

UP, LEFT, ENTER, EOF = "\x1b[A", "\x1b[D", "\r", "\x04"


def user_texts(fake: FakeOpenAI) -> list[str]:
    """The user message each model request ended with."""
    return [request["messages"][-1]["content"] for request in fake.requests]


def echo(body: dict[str, object]) -> fake_replies.Reply:
    messages = body["messages"]
    assert isinstance(messages, list)
    return fake_replies.text(f"you said {messages[-1]['content']!r}")


# -- a pipe ----------------------------------------------------------------------------------


async def test_a_line_that_is_not_utf8_is_answered_with_the_bad_bytes_replaced(tmp_path: Path) -> None:
    async with FakeOpenAI(echo) as fake:
        config = write_config(tmp_path, fake.base_url)
        process = await start_bridge(tmp_path, "chat", "--config", str(config), stdin=True)
        stdout, stderr = await asyncio.wait_for(
            process.communicate(b"caf\xe9 au lait\n\xff\xfe\nstill here\n"), 60
        )
    assert process.returncode == 0, stderr.decode()
    assert b"Traceback" not in stderr
    assert user_texts(fake) == ["caf\ufffd au lait", "\ufffd\ufffd", "still here"]
    assert stdout.decode().count("bridge ›") == 3


# -- a terminal ------------------------------------------------------------------------------


class Terminal:
    """`bridge chat` on a pseudo-terminal: keys go in, the screen's bytes are collected."""

    def __init__(self, master: int, process: asyncio.subprocess.Process) -> None:
        self.master = master
        self.process = process
        self._bytes = b""
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="pty-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:  # EIO once the child has closed the terminal
                return
            if not data:
                return
            with self._lock:
                # Kept as bytes: a read may end inside a character ("›" is three bytes).
                self._bytes += data

    @property
    def screen(self) -> str:
        with self._lock:
            return self._bytes.decode(errors="replace")

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    async def wait_for(self, text: str, count: int = 1) -> None:
        """Until `text` has been shown `count` times; AssertionError with the screen after 30 s."""
        for _ in range(600):
            if self.screen.count(text) >= count:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{text!r} not shown {count} times; the screen:\n{self.screen!r}")


@contextlib.asynccontextmanager
async def terminal_chat(tmp_path: Path, config: Path) -> AsyncIterator[Terminal]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = await asyncio.create_subprocess_exec(
        *bridge_command("chat", "--config", str(config)),
        stdin=slave,
        stdout=slave,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
        env=bridge_env(TERM="xterm"),
    )
    os.close(slave)
    terminal = Terminal(master, process)
    try:
        yield terminal
        await asyncio.wait_for(process.wait(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(master)


async def test_arrow_keys_edit_the_line_and_recall_history_even_in_the_next_chat(tmp_path: Path) -> None:
    async with FakeOpenAI(echo) as fake:
        config = write_config(tmp_path, fake.base_url)
        async with terminal_chat(tmp_path, config) as term:
            await term.wait_for("you ›")
            term.type("hello" + ENTER)
            await term.wait_for("you ›", 2)
            term.type(UP + ENTER)  # the line before, again
            await term.wait_for("you ›", 3)
            term.type("wrld" + LEFT * 3 + "o" + ENTER)  # fixed in place: "world"
            await term.wait_for("you ›", 4)
            term.type(EOF)
        assert term.process.returncode == 0
        assert user_texts(fake) == ["hello", "hello", "world"]
        history = tmp_path / "state" / "chat_history"
        assert history.is_file()

        async with terminal_chat(tmp_path, config) as term:
            await term.wait_for("you ›")
            term.type(UP + ENTER)  # the last line of the previous chat
            await term.wait_for("you ›", 2)
            term.type(EOF)
    assert user_texts(fake) == ["hello", "hello", "world", "world"]
    assert "\x1b[A" not in json.dumps(fake.requests)


# -- the local model and the config watcher ------------------------------------------------------


async def test_chat_on_the_local_model_logs_no_false_restart_warning(tmp_path: Path) -> None:
    async with FakeOpenAI(echo) as fake:
        cache = tmp_path / "local-model"
        cache.mkdir()
        port = int(fake.base_url.rsplit(":", 1)[1].split("/")[0])
        # What `bridge local-model start` leaves behind; this test process stands in for the server.
        state = {"pid": os.getpid(), "port": port, "mode": "native", "started": process_start(os.getpid())}
        (cache / "server.json").write_text(json.dumps(state))
        config = write_config(tmp_path, None)
        process = await start_bridge(
            tmp_path, "chat", "--config", str(config), stdin=True, BRIDGE_LOCAL_MODEL_DIR=str(cache)
        )
        assert process.stdin is not None and process.stderr is not None
        stderr: list[str] = []
        reloaded = asyncio.Event()

        async def collect() -> None:
            assert process.stderr is not None
            async for line in process.stderr:
                stderr.append(line.decode())
                if "config reloaded" in stderr[-1]:
                    reloaded.set()

        collecting = asyncio.create_task(collect())
        try:
            process.stdin.write(b"hi\n")
            await process.stdin.drain()
            await fake.wait_for_requests(1, timeout=30)
            # The watcher looks at the file once a second and reloads after a change holds still for
            # a second: three seconds is time for it to compare the file with the running settings.
            await asyncio.sleep(3)
            assert not any("config reloaded" in line or "restart" in line for line in stderr), stderr
            # A real edit is still noticed, and the local model's settings are not reported as edits.
            with config.open("a", encoding="utf-8") as file:
                file.write(
                    '[session.send_policy]\nrules = [{ action = "deny", match = { surface = "discord" } }]\n'
                )
            await asyncio.wait_for(reloaded.wait(), 15)
            process.stdin.close()
            await asyncio.wait_for(process.wait(), 30)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await collecting
    assert process.returncode == 0
    assert not any("restart" in line for line in stderr), stderr
    assert_no_traceback_lines(stderr)


def assert_no_traceback_lines(lines: list[str]) -> None:
    assert not any("Traceback" in line for line in lines), "".join(lines)


async def test_a_line_the_store_cannot_take_is_announced_and_the_next_line_is_read() -> None:
    lines = io.StringIO("first\nsecond\n")
    out = io.StringIO()
    console = ConsoleAdapter(stdin=lines, stdout=out)
    seen: list[str] = []

    async def locked_once(inbound: Inbound) -> None:
        seen.append(inbound.text)
        if len(seen) == 1:
            raise IntakeUnavailable("database is locked")

    await console.start(locked_once)
    await asyncio.wait_for(console.wait_closed(), 5)
    assert seen == ["first", "second"]
    assert "Could not store that message (database is locked); please send it again." in out.getvalue()


async def test_a_file_the_agent_sends_is_printed_with_its_caption_and_the_place_of_its_copy() -> None:
    out = io.StringIO()
    console = ConsoleAdapter(stdin=io.StringIO(""), stdout=out)
    item = Outbound(
        Route("console", "local"),
        "reply",
        "Your report",
        file=OutFile("report.pdf", "/data/media/ab/abc", 2048),
    )
    assert await console.send_file(item) is not None
    assert out.getvalue().endswith("Your report\n📎 report.pdf (2048 bytes): /data/media/ab/abc\n")
