"""The console adapter: lines read from stdin, replies written to stdout, for the local owner."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import itertools
import sys
from pathlib import Path
from types import ModuleType
from typing import TextIO

from adapters.console.files import ATTACH, local_attachment, read_local
from bridge.config import Settings
from bridge.errors import IntakeUnavailable
from bridge.events import Attachment, Inbound, InboundHandler, Outbound, Route
from bridge.platform import Adapter

CONSOLE_USER = "local"
CONSOLE_OWNER = f"console:{CONSOLE_USER}"

_DIM, _BOLD, _RESET = "\x1b[2m", "\x1b[1m", "\x1b[0m"
# readline counts every character of a prompt as a column unless codes are marked as invisible.
_HIDE, _SHOW = "\001", "\002"
HISTORY_LENGTH = 1000


def _replacing(stream: TextIO) -> TextIO:
    """The stream, reading bytes that are not valid text as U+FFFD instead of raising."""
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(errors="replace")
    return stream


def _line_editor() -> ModuleType | None:
    """The stdlib readline module (arrow keys, editing, history), or None where Python has none."""
    try:
        import readline
    except ImportError:
        return None
    return readline


class ConsoleAdapter(Adapter):
    """Reads lines until EOF; each line is one turn, answered before the next line is read."""

    surface = "console"
    supports_edit = False
    # The answer is printed token by token as the model streams it ([llm] stream).
    supports_stream = True
    text_limit = 1_000_000
    # Whoever types at this machine's terminal runs the bot: they are an owner, in session `main`.
    implicit_owners = (CONSOLE_OWNER,)

    def __init__(
        self, stdin: TextIO | None = None, stdout: TextIO | None = None, history: Path | None = None
    ) -> None:
        # A stray byte that is not UTF-8 (a paste, a binary file piped in) must not end the chat.
        self.stdin = stdin or _replacing(sys.stdin)
        self.stdout = stdout or sys.stdout
        self.interactive = self.stdin.isatty() and self.stdout.isatty()
        # Lines typed at a terminal are kept here, so the arrow keys reach them in the next chat too.
        self.history = history
        self._readline: ModuleType | None = None
        self._ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        # The answer streaming in on the open line, while one is: the reply that follows prints only
        # what of it this line does not show yet.
        self._streamed: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> ConsoleAdapter:
        # Line history beside the database, so each bot (each config) keeps its own.
        return cls(history=settings.storage.path.parent / "chat_history")

    async def start(self, handler: InboundHandler) -> None:
        # input() edits lines only on the process's own terminal, not on a stream handed in.
        if self.interactive and self.stdin is sys.stdin and self.stdout is sys.stdout:
            self._readline = _line_editor()
        if self._readline is not None and self.history is not None:
            self._readline.set_history_length(HISTORY_LENGTH)
            with contextlib.suppress(OSError):
                self._readline.read_history_file(self.history)
        self._task = asyncio.create_task(self._repl(handler), name="console")

    async def wait_closed(self) -> None:
        """Wait for EOF on stdin and for the last turn to finish."""
        if self._task is not None:
            await self._task

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _repl(self, handler: InboundHandler) -> None:
        while True:
            # A thread read works for a terminal, a pipe and a redirected file alike.
            line = await asyncio.to_thread(self._read_line)
            if line == "":
                return
            text = line.rstrip("\r\n")
            if not text.strip():
                continue
            self._save_history()
            attachments: tuple[Attachment, ...] = ()
            if ATTACH.match(text):
                found = await asyncio.to_thread(local_attachment, text)
                if isinstance(found, str):
                    self.notice(f"» {found}")
                    continue
                attachments, text = found
            inbound = Inbound(
                surface=self.surface,
                chat_type="dm",
                chat_id=CONSOLE_USER,
                sender_id=CONSOLE_USER,
                text=text,
                message_id=None,
                sender_name="console",
                attachments=attachments,
            )
            try:
                done = await handler(inbound)
            except IntakeUnavailable as exc:
                # Nothing redelivers a console line: say so, and the person can send it again.
                self.notice(f"» Could not store that message ({exc}); please send it again.")
                continue
            if done is not None:
                await done

    def _read_line(self) -> str:
        """One line with its newline, or "" at EOF; with readline when it edits this terminal."""
        if self._readline is None:
            if self.interactive:
                self._write(f"{_BOLD}you ›{_RESET} ", newline=False)
            return self.stdin.readline()
        try:
            # input() adds the line to readline's history itself.
            return input(f"{_HIDE}{_BOLD}{_SHOW}you ›{_HIDE}{_RESET}{_SHOW} ") + "\n"
        except EOFError:
            self._write("")
            return ""

    def _save_history(self) -> None:
        if self._readline is not None and self.history is not None:
            # Written after each line, so a chat that is killed keeps what was typed; a history
            # file that can't be written (a read-only home) costs only the history.
            with contextlib.suppress(OSError):
                self.history.parent.mkdir(parents=True, exist_ok=True)
                self._readline.write_history_file(self.history)

    # ------------------------------------------------------------------ Sender

    async def stream(self, route: Route, delta: str) -> None:
        if self._streamed is None:
            self._write(self._style("bridge ›", _BOLD) + " ", newline=False)
            self._streamed = ""
        self._streamed += delta
        self._write(delta, newline=False)

    async def send(self, item: Outbound) -> str | None:
        streamed, self._streamed = self._streamed, None
        if streamed is not None:
            if item.kind == "reply" and item.text.startswith(streamed):
                # The answer that streamed in: the rest of it (a note, if any) ends the line.
                self._write(item.text[len(streamed) :])
                return str(next(self._ids))
            # The streamed text was a preamble before tool calls, or differs from the reply: its line
            # ends here, and the item goes on a line of its own.
            self._write("")
        if item.kind == "activity":
            self._write(self._style("  " + item.text, _DIM))
        elif item.kind == "notice":
            self._write(self._style("» " + item.text.replace("\n", "\n  "), _DIM))
        else:
            self._write(self._style("bridge ›", _BOLD) + " " + item.text)
        return str(next(self._ids))

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A file /attach named: read from this machine, as it is now."""
        return await asyncio.to_thread(read_local, attachment, max_bytes)

    async def send_file(self, item: Outbound) -> str | None:
        """A file the agent sent: on this machine already, so its place is printed (a copy kept in
        the media folder, whatever becomes of the workspace file)."""
        assert item.file is not None
        line = f"📎 {item.file.name} ({item.file.size} bytes): {item.file.path}"
        text = f"{item.text}\n{line}" if item.text else line
        return await self.send(dataclasses.replace(item, text=text, file=None))

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        # A terminal cannot rewrite earlier lines portably; delivery sends one line per tool instead.
        return None

    async def typing(self, route: Route) -> None:
        return None

    def notice(self, text: str) -> None:
        if self._streamed is not None:
            self._streamed = None
            self._write("")
        self._write(self._style(text, _DIM))

    def _style(self, text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if self.interactive else text

    def _write(self, text: str, *, newline: bool = True) -> None:
        self.stdout.write(text + ("\n" if newline else ""))
        self.stdout.flush()
