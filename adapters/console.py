"""The console surface: a REPL on stdin/stdout for the local owner, session key `main`."""

from __future__ import annotations

import asyncio
import itertools
import sys
from typing import TextIO

from bridge.events import Inbound, InboundHandler, Outbound, Route

CONSOLE_USER = "local"
CONSOLE_OWNER = f"console:{CONSOLE_USER}"

_DIM, _BOLD, _RESET = "\x1b[2m", "\x1b[1m", "\x1b[0m"


class ConsoleAdapter:
    """Reads lines until EOF; each line is one turn, answered before the next line is read."""

    surface = "console"
    supports_edit = False
    text_limit = 1_000_000
    # Whoever types at this machine's terminal runs the bot: they are an owner, in session `main`.
    implicit_owners = (CONSOLE_OWNER,)

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.interactive = self.stdin.isatty() and self.stdout.isatty()
        self._ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None

    async def start(self, handler: InboundHandler) -> None:
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
            if self.interactive:
                self._write(f"{_BOLD}you ›{_RESET} ", newline=False)
            # A thread read works for a terminal, a pipe and a redirected file alike.
            line = await asyncio.to_thread(self.stdin.readline)
            if line == "":
                return
            text = line.rstrip("\r\n")
            if not text.strip():
                continue
            inbound = Inbound(
                surface=self.surface,
                chat_type="dm",
                chat_id=CONSOLE_USER,
                sender_id=CONSOLE_USER,
                text=text,
                message_id=None,
                sender_name="console",
            )
            done = await handler(inbound)
            if done is not None:
                await done

    # ------------------------------------------------------------------ Sender

    async def send(self, item: Outbound) -> str | None:
        if item.kind == "activity":
            self._write(self._style("  " + item.text, _DIM))
        elif item.kind == "notice":
            self._write(self._style("» " + item.text.replace("\n", "\n  "), _DIM))
        else:
            self._write(self._style("bridge ›", _BOLD) + " " + item.text)
        return str(next(self._ids))

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        # A terminal cannot rewrite earlier lines portably; delivery sends one line per tool instead.
        return None

    async def typing(self, route: Route) -> None:
        return None

    def notice(self, text: str) -> None:
        self._write(self._style(text, _DIM))

    def _style(self, text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if self.interactive else text

    def _write(self, text: str, *, newline: bool = True) -> None:
        self.stdout.write(text + ("\n" if newline else ""))
        self.stdout.flush()
