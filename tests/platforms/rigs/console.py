"""The console: the real ConsoleAdapter reading lines from a pipe and printing to a recorded stream;
for the kill -9 case, a real `bridge chat` process whose output the rig stops reading, as a paused
terminal or a full pipe would."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from adapters.console import ConsoleAdapter
from bridge.app import Bridge
from devkit.fakes.openai_server import FakeOpenAI
from devkit.processes import start_bridge
from tests.harness import make_settings
from tests.invariants import rows
from tests.platforms.rig import HAS, Capabilities, Configure, Lacks, PlatformRig, Process, Said
from tests.waiting import eventually

REPLY, ACTIVITY, NOTICE = "bridge › ", "  ", "» "
FILE_LINE = re.compile(r"📎 (?P<name>.+) \((?P<size>\d+) bytes\): (?P<path>.+)$")
POISON = b"caf\xe9 \xff\xfe au lait\n"  # not UTF-8


class Transcript(io.StringIO):
    """A terminal that keeps every write: a streamed answer arrives in many."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def said_in(writes: list[str]) -> list[Said]:
    """The messages a console printed, from its writes: each ends with a newline. A reply starts with
    its prompt; activity lines are indented; notices start with ». A block without one continues the
    message before it (a streamed answer whose pieces held a newline); before any, it is the banner."""
    said: list[Said] = []
    block, pieces = "", 0
    for write in writes:
        block, pieces = block + write, pieces + 1
        if not block.endswith("\n"):
            continue
        text = block[:-1]
        for prefix in (REPLY, ACTIVITY, NOTICE):
            if text.startswith(prefix):
                # A streamed reply is its prompt, each piece, then the end of the line.
                said.append(Said(str(len(said) + 1), text[len(prefix) :], max(1, pieces - 1)))
                break
        else:
            if said:
                said[-1].text += "\n" + text
                said[-1].states += pieces
        block, pieces = "", 0
    if block:
        said.append(Said(str(len(said) + 1), block.removeprefix(REPLY), pieces))  # cut short
    for each in said:
        found = FILE_LINE.search(each.text)
        if found is not None:
            each.file = (found["name"], Path(found["path"]).read_bytes())
    return said


class ConsolePlatform(PlatformRig):
    name = "console"
    capabilities = Capabilities(
        groups=Lacks("a terminal is its owner's direct chat: every line is theirs, in session main"),
        threads=Lacks("a terminal has no threads"),
        edits=Lacks("a terminal can't rewrite printed lines portably: one line per finished tool"),
        streaming=HAS,  # printed as it comes
        files=HAS,  # /attach PATH in; a file out is printed as the path of its copy
        rate_limits=Lacks("a terminal takes every line at once: there is no rate limit to honour"),
        idempotent_sends=Lacks(
            "a printed line can't be recognised again: a reply a kill cut short is printed whole "
            "at the next start"
        ),
        encryption=Lacks("a local terminal: nothing crosses a network"),
    )
    # Long enough that printing it fills the pipe, so a kill lands while it is being sent.
    kill_answer = "the answer" + " and more" * 50_000

    def __init__(self, request: Any, tmp_path: Path) -> None:
        super().__init__(request, tmp_path)
        self.out = Transcript()
        self._stdin: int | None = None
        # `bridge chat` processes, each with what it printed.
        self._process: Process | None = None
        self._outputs: list[bytearray] = []
        self._hang = False

    @asynccontextmanager
    async def running(
        self, llm: FakeOpenAI, *, stream: bool = True, configure: Configure | None = None
    ) -> AsyncIterator[None]:
        settings = make_settings(self.tmp_path, llm.base_url, owners=[])
        settings.llm.stream = stream
        if configure is not None:
            configure(settings)
        read_end, self._stdin = os.pipe()
        # Bytes that are not UTF-8 read as U+FFFD, as `bridge chat` reads its own stdin.
        stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(read_end)), encoding="utf-8", errors="replace")
        adapter = ConsoleAdapter(stdin=stdin, stdout=self.out)
        try:
            async with Bridge(settings, extra_owners=adapter.implicit_owners) as bridge:
                bridge.add_sender(adapter)
                await adapter.start(bridge.handle)
                try:
                    with self.started(bridge, adapter):
                        yield
                finally:
                    # End of input: the reading thread returns, and the console after its last turn.
                    os.close(self._stdin)
                    self._stdin = None
                    await asyncio.wait_for(adapter.wait_closed(), 15)
        finally:
            if self._stdin is not None:
                os.close(self._stdin)
            stdin.close()

    async def dm(self, text: str) -> None:
        await self._type((text + "\n").encode())

    async def _type(self, line: bytes) -> None:
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.write(line)
            await self._process.stdin.drain()
        else:
            assert self._stdin is not None, "console: not running"
            os.write(self._stdin, line)

    def dm_said(self) -> list[Said]:
        if not self._outputs:
            return said_in(self.out.writes)
        said = []
        for output in self._outputs:  # each process begins with its banner
            said += said_in(output.decode(errors="replace").splitlines(keepends=True))
        return said

    def output_calls(self) -> int:
        return len(self.out.writes)

    async def dm_file(self, caption: str, name: str, mime: str, data: bytes) -> None:
        path = self.tmp_path / name
        path.write_bytes(data)
        await self.dm(f'/attach "{path}" {caption}')

    async def poison(self) -> None:
        # A terminal's poison is bytes that are not text (a binary file piped in).
        await self._type(POISON)

    async def assert_poison_skipped(self, records: list[logging.LogRecord]) -> None:
        # Nothing to skip: the line is read with U+FFFD for what isn't UTF-8, and the chat goes on.
        [(first,)] = rows(self.db, "SELECT content FROM messages WHERE kind = 'user' ORDER BY id LIMIT 1")
        assert first == "caf\ufffd \ufffd\ufffd au lait"

    # -- `bridge chat` -----------------------------------------------------------------------------

    @asynccontextmanager
    async def process(self, llm: FakeOpenAI) -> AsyncIterator[Process]:
        config = self.config_file(llm, "console:local", "")
        process = await start_bridge(self.tmp_path, "chat", "--config", str(config), stdin=True)
        output = bytearray()
        self._outputs.append(output)
        self._process = process
        assert process.stdout is not None
        reader = asyncio.create_task(self._read(process, output), name="console-output")
        try:
            yield process
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await asyncio.wait_for(reader, 15)
            self._process, self._hang = None, False

    async def _read(self, process: Process, output: bytearray) -> None:
        assert process.stdout is not None
        start = (REPLY + self.kill_answer[:40]).encode()
        while chunk := await process.stdout.read(4096):
            output += chunk
            if self._hang and start in output:
                # The terminal stops reading, so the reply's write blocks, until the process is gone
                # (asyncio tells of its exit only once its output is read to the end).
                await eventually(lambda: process.returncode is not None, "console: the kill", 60)
                self._hang = False

    def hang_next_send(self) -> None:
        self._hang = True

    async def send_in_flight(self) -> None:
        start = (REPLY + self.kill_answer[:40]).encode()
        await eventually(lambda: start in self._outputs[-1], "console: the reply being printed", 30)

    async def stop(self, process: Process) -> None:
        # End of input: `bridge chat` finishes the turn in progress and exits.
        assert process.stdin is not None
        process.stdin.close()
        assert await asyncio.wait_for(process.wait(), 15) == 0
