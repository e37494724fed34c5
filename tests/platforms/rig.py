"""What the conformance suite asks of a platform: the `PlatformRig` every platform implements once.

A rig runs one platform's real adapter, as the core loads it, against that platform's fake: a whole
Bridge in this process for most cases, and a real process (`bridge run`, `bridge chat`, or a plugin's
own runner) for the kill -9 case. It plays the platform's users (a DM from the owner, a group message
from a member, a file), reads back what the bot showed there (edits included, as `Said`), and injects
the platform's own faults (a rate limit, an event it can't parse, a send that never answers).

It also declares what its platform can do (`Capabilities`). A case that needs something a platform
lacks is not generated for it: the suite reports it "not applicable" with the rig's reason, and
tests/platforms/test_capabilities.py holds the declarations to the adapter's own class attributes
where bridge/platform.py has one, so a declaration cannot lie.

Adding a platform is one subclass in tests/platforms/rigs/ and one line in `RIGS` (conftest.py);
docs/adapters.md, "Running the conformance suite on a new adapter", walks through it.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Literal

from bridge.app import Bridge
from bridge.config import Settings
from bridge.platform import Adapter
from devkit.fakes.openai_server import FakeOpenAI
from devkit.processes import bridge_process
from tests.waiting import eventually

Configure = Callable[[Settings], None]
Process = asyncio.subprocess.Process


@dataclass(frozen=True)
class Lacks:
    """A capability the platform does not have, and why (shown as the case's "not applicable")."""

    why: str


# A capability: True, or what the platform lacks instead.
Support = Literal[True] | Lacks
HAS: Literal[True] = True


@dataclass(frozen=True)
class Capabilities:
    """What a platform can do, as the suite runs it. Each field is one column of docs/platforms.md."""

    # Shared chats (groups, channels, rooms) where the bot answers only when addressed.
    groups: Support
    # Threads or topics inside a shared chat, each a session of its own.
    threads: Support
    # Messages edited in place: tool activity is one message (bridge.platform: supports_edit).
    edits: Support
    # The answer shows as it is written: a draft edited as it grows, or printed as it comes
    # (streams_drafts or supports_stream).
    streaming: Support
    # Files both ways: attachments fetched when a run needs them, and files the agent sends
    # (download and send_file overridden).
    files: Support
    # The platform answers "too many requests, wait N s", and the adapter waits that long.
    rate_limits: Support
    # The platform drops a repeated send, so a send cut short by a kill never shows twice
    # (dedupes_by_nonce).
    idempotent_sends: Support
    # End-to-end encrypted chats the bot reads and answers in.
    encryption: Support

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def support(self, name: str) -> Support:
        value: Support = getattr(self, name)
        return value

    def has(self, *names: str) -> bool:
        return all(self.support(name) is True for name in names)

    def missing(self, *names: str) -> Lacks | None:
        """The first of `names` the platform lacks, with its reason; None when it has them all."""
        for name in names:
            value = self.support(name)
            if isinstance(value, Lacks):
                return value
        return None


@dataclass
class Said:
    """One message the bot shows in a chat, as it reads now."""

    id: str
    text: str
    # How many versions of it the user saw: 1 when it was shown once as it reads; more when it was
    # edited in place (activity, a draft) or printed piece by piece (a terminal's stream).
    states: int = 1
    # (name, bytes) of the file it carries.
    file: tuple[str, bytes] | None = None


class PlatformRig(ABC):
    """One platform, run by the suite. Built per test by the `platform` fixture (conftest.py) with
    the test's pytest request, so a rig may take the platform's existing fixtures (its fake, its
    Bridge factory) with `request.getfixturevalue`."""

    # The surface: the entry point's name, so the suite loads the adapter class as the core does.
    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    # In docs/platforms.md's matrix (the platforms Bridge ships); the suite's example plugin is not.
    in_matrix: ClassVar[bool] = True
    # The session key of the owner's DM, of the rig's group, and of its thread.
    dm_key: ClassVar[str] = "main"
    group_key: ClassVar[str] = ""
    # The answer the kill -9 case has in flight: long enough to be cut short where sending takes time.
    kill_answer: ClassVar[str] = "the answer"

    def __init__(self, request: Any, tmp_path: Path) -> None:
        self.request = request
        self.tmp_path = tmp_path
        self.db = tmp_path / "bridge.db"
        self.workspace = tmp_path / "workspace"
        # The session key of the rig's thread, once `in_thread` made one.
        self.thread_key = ""
        self._bridge: Bridge | None = None
        self._adapter: Adapter | None = None

    # -- in this process ------------------------------------------------------------------------

    @abstractmethod
    def running(
        self, llm: FakeOpenAI, *, stream: bool = True, configure: Configure | None = None
    ) -> AbstractAsyncContextManager[None]:
        """Bridge and the adapter on the fake until the block ends (`self.bridge`, `self.adapter`).
        stream=False sends each reply whole; configure(settings) edits settings before the Bridge is
        built."""

    @property
    def bridge(self) -> Bridge:
        assert self._bridge is not None, f"{self.name}: not running"
        return self._bridge

    @property
    def adapter(self) -> Adapter:
        assert self._adapter is not None, f"{self.name}: not running"
        return self._adapter

    @contextmanager
    def started(self, bridge: Bridge, adapter: Adapter) -> Iterator[None]:
        """For `running`: what the block runs with."""
        self._bridge, self._adapter = bridge, adapter
        try:
            yield
        finally:
            self._bridge = self._adapter = None

    async def settled(self) -> None:
        """No answer is running and nothing waits to be sent or edited."""
        await asyncio.wait_for(self.bridge.lanes.idle(), 15)
        await asyncio.wait_for(self.bridge.delivery.idle(), 15)

    @abstractmethod
    async def dm(self, text: str) -> None:
        """The owner writes to the bot directly (in this process, or to the running process)."""

    @abstractmethod
    def dm_said(self) -> list[Said]:
        """What the bot shows in the owner's DM, oldest first."""

    @abstractmethod
    def output_calls(self) -> int:
        """Every send, edit, upload or typing indicator the platform has seen from the bot."""

    async def said(self, where: Callable[[], list[Said]], n: int, what: str) -> list[Said]:
        """Wait until `where` shows at least n messages and (in this process) the bot is idle."""
        await eventually(lambda: len(where()) >= n, f"{self.name}: {n} message(s) in {what}", 20)
        if self._bridge is not None:
            await self.settled()
        return where()

    # -- groups and threads (where `capabilities` says so) ---------------------------------------

    async def group(self, text: str, *, mention: bool) -> None:
        """A member writes in the rig's group, addressing the bot (a mention, or a command addressed to
        it, where `text` is one) or not."""
        raise NotImplementedError(f"{self.name} declares groups but its rig can't write in one")

    def group_said(self) -> list[Said]:
        raise NotImplementedError(f"{self.name} declares groups but its rig can't read one")

    async def in_thread(self, text: str) -> None:
        """A member addresses the bot in a thread (or topic) of the rig's group."""
        raise NotImplementedError(f"{self.name} declares threads but its rig can't write in one")

    def thread_said(self) -> list[Said]:
        raise NotImplementedError(f"{self.name} declares threads but its rig can't read one")

    # -- files ------------------------------------------------------------------------------------

    async def dm_file(self, caption: str, name: str, mime: str, data: bytes) -> None:
        """The owner sends a file with a caption."""
        raise NotImplementedError(f"{self.name} declares files but its rig can't send one")

    # -- the platform's faults ----------------------------------------------------------------

    def rate_limit_next_send(self) -> float:
        """The platform refuses the bot's next message with its "too many requests, retry after N s";
        returns N."""
        raise NotImplementedError(f"{self.name} declares rate limits but its rig can't inject one")

    def rate_limit_waits(self) -> list[float]:
        """How long the adapter waited before each repeat of a refused send, as the rig saw it."""
        raise NotImplementedError

    def send_attempts(self) -> int:
        """Requests the platform got to create a message, refused ones included."""
        raise NotImplementedError

    @abstractmethod
    async def poison(self) -> None:
        """An event the adapter can't parse or handle arrives, from the owner's DM where it can."""

    @abstractmethod
    async def assert_poison_skipped(self, records: list[logging.LogRecord]) -> None:
        """The poison event was dealt with as the platform needs: logged once and skipped (and, where
        the platform redelivers, confirmed so that it never comes again)."""

    # -- a real process, for the kill -9 case ------------------------------------------------------

    @abstractmethod
    def process(self, llm: FakeOpenAI) -> AbstractAsyncContextManager[Process]:
        """The bot as a process (whole replies, `resend_uncertain` left at its default) on this
        platform's fake, in tmp_path with self.db as its store; yields once it listens. The block may
        end it with kill9 or `stop`; it is killed if still running when the block ends."""

    def config_file(self, llm: FakeOpenAI, owner: str, section: str) -> Path:
        """A config.toml for the process: one owner, the fake model, whole replies, and `section`."""
        config = self.tmp_path / "config.toml"
        config.write_text(
            f'owners = ["{owner}"]\n'
            f'[llm]\nbase_url = "{llm.base_url}"\nmodel = "fake"\nmax_retries = 0\nstream = false\n'
            f'[storage]\npath = "{self.db}"\n{section}',
            encoding="utf-8",
        )
        return config

    @asynccontextmanager
    async def bridge_run(self, config: Path, listening: Callable[[], bool]) -> AsyncIterator[Process]:
        """`bridge run --config CONFIG`, yielded once `listening()` says the platform sees it connected."""
        async with bridge_process(self.tmp_path, config) as process:
            await eventually(lambda: listening() or process.returncode is not None, f"{self.name}: listening")
            if process.returncode is not None:
                assert process.stderr is not None
                raise AssertionError(f"bridge run ended: {(await process.stderr.read()).decode()[-2000:]}")
            yield process

    async def stop(self, process: Process) -> None:
        """A clean stop: SIGTERM, and exit status 0."""
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 15) == 0

    @abstractmethod
    def hang_next_send(self) -> None:
        """The platform will carry out the bot's next message and never answer the request: the
        worst moment for a kill, when the message arrived and the bot can't know it."""

    async def send_in_flight(self) -> None:
        """Wait until the send `hang_next_send` aimed at has reached the platform."""
        await eventually(lambda: len(self.dm_said()) >= 1, f"{self.name}: the send in flight", 30)
