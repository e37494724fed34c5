"""The soak's driver: turns in several chats, `bridge run` killed at random moments and restarted."""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import subprocess
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devkit.processes import bridge_command, bridge_env
from tests.soak.model import LONG, PLAN_WEIGHTS, VOICE_MAGIC, SoakModel
from tests.soak.side import CHATS, Chat, Side

GRACE_S = 3.0
# `bridge run` must exit within shutdown_grace_s + 5 s of a SIGTERM; the rest is slack for a busy CI box.
SIGTERM_LIMIT_S = GRACE_S + 5 + 2
STARTUP_WINDOW_S = 1.5
# Per-step bounds: generous, so a slow machine passes, but a hang fails with a message saying what hung.
SPAWN_EXIT_S = 10.0
ANSWER_WITHIN_S = 60.0
QUIET_WITHIN_S = 120.0
QUIET_FOR_S = 2.0
# All else quiet, but a message no run took up: no amount of waiting helps; the checks name it.
STUCK_FOR_S = 15.0
STARTED_WITHIN_S = 30.0
RUNNING_LINE = b"bridge: running: "
UNTAKEN = "messages not taken up by any run in:"
IN_FLIGHT_WITHIN_S = 10.0
# The photo soak messages carry (a JPEG's first bytes are enough: the model here does not see).
PHOTO = b"\xff\xd8\xff\xe0" + b"\x00" * 256

# When a kill comes: during start-up, while a model request is open, while a sendMessage is in flight
# (any), while a reply or notice row is `sending` (so its chunk may arrive twice), or at any moment.
# "media": while a voice note is being transcribed (its download done, its words not yet stored).
KILL_KINDS = {"startup": 20, "model": 25, "send": 20, "reply": 20, "random": 15, "media": 10}


@dataclass(frozen=True, slots=True)
class SoakSize:
    turns: int
    kills: int
    seed: int


@dataclass(slots=True)
class Kill:
    """One SIGKILL and what it interrupted."""

    planned: str
    age_s: float
    model_open: bool
    send_in_flight: bool
    sending_rows: dict[int, str]  # outbox rows the kill left `sending`: id → kind
    transcribing: bool = False

    @property
    def startup(self) -> bool:
        return self.age_s < STARTUP_WINDOW_S

    @property
    def mid_send(self) -> bool:
        return self.send_in_flight or bool(self.sending_rows)


@dataclass
class Soak:
    """Runs the soak against the platform `side` and `model`; read the record from handed, kills and
    caught."""

    tmp_path: Path
    side: Side
    model: SoakModel
    llm_url: str
    size: SoakSize
    rng: random.Random
    process: asyncio.subprocess.Process | None = None
    spawned_at: float = 0.0
    spawns: int = 0
    turn: int = 0
    kills: list[Kill] = field(default_factory=list)
    # Outbox row id → how often a kill (or a SIGTERM) left it `sending`: each may be delivered once more.
    caught: Counter[int] = field(default_factory=Counter)
    # Chat id → (platform message id, text) of every message handed to the bot, in order.
    handed: defaultdict[int, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))
    order: list[str] = field(default_factory=list)  # every text, in the order it was pushed
    # The texts sent as voice notes (the words are the transcript) and as photo captions.
    voiced: set[str] = field(default_factory=set)
    photos: int = 0
    problems: list[str] = field(default_factory=list)
    stop_times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        extra = (
            # Messages that pile up while the bot is down come in as one batch at the restart; the soak
            # is about kills, not about the max_queued refusal, which has tests of its own.
            f"[runs]\nmax_queued = 1000\nshutdown_grace_s = {GRACE_S}\n"
            # Voice notes are transcribed by the fake model's server (SoakModel.transcribe).
            f'[stt]\nbase_url = "{self.llm_url}"\n'
        )
        self.config = self.side.config(self.tmp_path, self.llm_url, extra)
        self.db = self.tmp_path / "bridge.db"
        self.logs = self.tmp_path / "logs"
        self.logs.mkdir(exist_ok=True)

    # -- the whole run -----------------------------------------------------------------------

    async def run(self) -> None:
        # Without media (the side sends text only) no kill can aim at a transcription.
        aims = KILL_KINDS if self.side.media else {k: w for k, w in KILL_KINDS.items() if k != "media"}
        kinds = self.rng.choices(list(aims), weights=list(aims.values()), k=self.size.kills)
        # A start-up kill comes right after the restart that follows the kill before it (the first
        # ones right after the first start); every other kill is placed at a random turn.
        leading: list[str] = []
        chains: list[list[str]] = []
        for kind in kinds:
            if kind == "startup":
                (chains[-1] if chains else leading).append(kind)
            else:
                chains.append([kind])
        turns = sorted(self.rng.randrange(self.size.turns) for _ in chains)
        events = deque(zip(turns, chains, strict=True))

        await self.spawn()
        await self.startup_kills(len(leading))
        while self.turn < self.size.turns:
            chat = self.push_turn()
            fired = False
            while events and events[0][0] < self.turn:
                _, (kind, *startups) = events.popleft()
                await self.kill(kind)
                await self.spawn()
                await self.startup_kills(len(startups))
                fired = True
            if not fired:
                await self.pace(chat)
        while events:
            _, (kind, *startups) = events.popleft()
            await self.kill(kind)
            await self.spawn()
            await self.startup_kills(len(startups))

        # Work queued behind busy chats when the SIGTERM comes stays stored for the next start.
        for chat in self.rng.sample(CHATS, 2):
            self.push_turn(chat, burst=3)
        await asyncio.sleep(self.rng.uniform(0, 0.3))
        await self.sigterm()
        # One clean start delivers what is left and answers what is unanswered.
        await self.spawn()
        await self.wait_quiet()
        await self.sigterm()

    # -- turns -------------------------------------------------------------------------------

    def push_turn(self, chat: Chat | None = None, burst: int | None = None, media: str | None = None) -> Chat:
        """One turn: a message, or a burst of several in one chat within a few ms."""
        chat = chat or self.rng.choice(CHATS)
        if burst is None:
            burst = 1 if self.rng.random() < 0.8 else self.rng.randint(2, 5)
        self.turn += 1
        for _ in range(burst):
            n = len(self.order) + 1
            plan = self.rng.choices(list(PLAN_WEIGHTS), weights=list(PLAN_WEIGHTS.values()))[0]
            text = f"m{n:04d}-{chat.label}-{plan}" + (f"-{LONG}" if self.rng.random() < 0.08 else "")
            # Some messages come as a voice note (its words are the text) or a photo with the text
            # as caption: a kill may land while the run downloads or transcribes them.
            if self.side.media:
                media = media or self.rng.choices(["text", "voice", "photo"], weights=[80, 10, 10])[0]
            else:
                media = "text"
            kw: dict[str, Any] = {}
            if media == "voice":
                kw["voice"] = VOICE_MAGIC + text.encode()
                self.voiced.add(text)
            elif media == "photo":
                kw = {"photo": PHOTO, "caption": text}
                self.photos += 1
            words = None if media != "text" else text
            sender = self.rng.choice(chat.senders) if chat.group else chat.chat_id
            self.handed[chat.chat_id].append((self.side.push(chat, sender, words, **kw), text))
            self.order.append(text)
        return chat

    async def pace(self, chat: Chat) -> None:
        """Between turns: sometimes wait for the answer, sometimes go on at once or after a moment."""
        roll = self.rng.random()
        if roll < 0.45:
            await self.until(
                lambda: self.taken_up(chat), ANSWER_WITHIN_S, f"the messages in {chat.label} taken up"
            )
        elif roll > 0.6:
            await asyncio.sleep(self.rng.uniform(0, 0.5))

    # -- the process -------------------------------------------------------------------------

    async def spawn(self) -> None:
        self.spawns += 1
        log = self.logs / f"{self.spawns:04d}.log"
        with log.open("wb") as out:  # the child keeps its own descriptor; a pipe could fill and block it
            self.process = await asyncio.create_subprocess_exec(
                *bridge_command("run", "--config", str(self.config)),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.tmp_path,
                env=bridge_env(),
            )
        self.spawned_at = asyncio.get_running_loop().time()

    async def startup_kills(self, count: int) -> None:
        for _ in range(count):
            if self.turn < self.size.turns and self.rng.random() < 0.6:
                self.push_turn()  # a message arriving while Bridge starts
            wait = self.spawned_at + self.rng.uniform(0, STARTUP_WINDOW_S) - asyncio.get_running_loop().time()
            await asyncio.sleep(max(wait, 0))
            await self.kill("startup")
            await self.spawn()

    async def kill(self, planned: str) -> None:
        """SIGKILL at the moment `planned` asks for (or when waiting for it ran out), then note what the
        kill caught: the outbox rows it left `sending` may each be delivered once more."""
        if planned == "model":
            await self.until(lambda: self.model.open > 0, IN_FLIGHT_WITHIN_S, None)
            await asyncio.sleep(self.rng.uniform(0, 0.05))
        elif planned == "send":
            await self.until(lambda: self.side.sends_in_flight() > 0, IN_FLIGHT_WITHIN_S, None)
        elif planned == "reply":
            await self.until(self.reply_sending, IN_FLIGHT_WITHIN_S, None)
        elif planned == "random":
            await asyncio.sleep(self.rng.uniform(0, 1.0))
        elif planned == "media":
            if self.model.transcribing == 0:
                self.push_turn(burst=1, media="voice")
            await self.until(lambda: self.model.transcribing > 0, IN_FLIGHT_WITHIN_S, None)
            await asyncio.sleep(self.rng.uniform(0, 0.05))
        process = self.alive()
        age = asyncio.get_running_loop().time() - self.spawned_at
        model_open = self.model.open > 0
        in_flight = self.side.sends_in_flight() > 0
        transcribing = self.model.transcribing > 0
        process.kill()
        await asyncio.wait_for(process.wait(), SPAWN_EXIT_S)
        rows = self.note_sending(f"kill #{len(self.kills) + 1} ({planned})")
        self.kills.append(Kill(planned, age, model_open, in_flight, rows, transcribing))

    async def sigterm(self) -> None:
        """SIGTERM once the bot runs: the process must exit 0 within shutdown_grace_s + 5 s.

        It waits for the start-up to finish because this is about stopping a running bot (work in
        flight, work queued); a SIGTERM during start-up has tests of its own (test_shutdown.py).
        """
        await self.until(self.started, STARTED_WITHIN_S, "bridge run logging that it is running")
        process = self.alive()
        loop = asyncio.get_running_loop()
        started = loop.time()
        process.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(process.wait(), SIGTERM_LIMIT_S)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(
                f"bridge run did not exit within {SIGTERM_LIMIT_S:g} s of SIGTERM\n{self.log_tail()}"
            ) from None
        self.stop_times.append(loop.time() - started)
        assert code == 0, f"bridge run exited {code} after SIGTERM\n{self.log_tail()}"
        self.note_sending("SIGTERM")

    def alive(self) -> asyncio.subprocess.Process:
        process = self.process
        assert process is not None
        if process.returncode is not None:
            raise AssertionError(f"bridge run exited by itself with {process.returncode}\n{self.log_tail()}")
        return process

    def note_sending(self, when: str) -> dict[int, str]:
        found = self.query("SELECT id, kind, chat_id FROM outbox WHERE state = 'sending'")
        rows = {row_id: (kind, chat) for row_id, kind, chat in found}
        chats = Counter(chat for _, chat in rows.values())
        for chat, n in chats.items():
            if n > 1:
                self.problems.append(f"{when} left {n} rows of chat {chat} `sending`, not one")
        self.caught.update(rows.keys())
        return {row_id: kind for row_id, (kind, _) in rows.items()}

    async def stop(self) -> None:
        """Kill whatever is still running (a failed test); the record stays as it is."""
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()

    def started(self) -> bool:
        log = self.logs / f"{self.spawns:04d}.log"
        return log.exists() and RUNNING_LINE in log.read_bytes()

    def log_tail(self, lines: int = 40) -> str:
        log = self.logs / f"{self.spawns:04d}.log"
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        return f"--- last {lines} lines of {log} ---\n" + "\n".join(text.splitlines()[-lines:])

    # -- waiting on the database -------------------------------------------------------------

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows from the live database, [] before Bridge created it (read-only: never creates it)."""
        if not self.db.exists():
            return []
        try:
            with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5) as db:
                return list(db.execute(sql, params))
        except sqlite3.OperationalError:
            return []  # no tables yet: the first start is still migrating

    def reply_sending(self) -> bool:
        return bool(self.query("SELECT 1 FROM outbox WHERE state = 'sending' AND kind != 'activity' LIMIT 1"))

    def taken_up(self, chat: Chat) -> bool:
        """Every message handed to the bot in the chat is stored and taken up by a run that ended."""
        handed = self.handed[chat.chat_id]
        if not handed:
            return True
        stored = self.query(
            "SELECT MAX(id), session_id, COUNT(*) FROM messages WHERE kind = 'user' "
            "AND platform_msg_id LIKE ?",
            f"{self.side.surface}:{self.side.chat_key(chat.chat_id)}:%",
        )
        if not stored or stored[0][2] < len(handed):
            return False
        newest, session, _ = stored[0]
        runs = self.query(
            "SELECT COALESCE(MAX(input_upto), 0), COUNT(CASE WHEN status = 'running' THEN 1 END) "
            "FROM runs WHERE session_id = ?",
            session,
        )
        return bool(runs) and runs[0][0] >= newest and runs[0][1] == 0

    def busy(self) -> str | None:
        """What is still going on, or None when all is quiet."""
        if self.model.open or self.side.requests_in_flight():
            return "a model request or a send is in flight"
        if self.side.unconfirmed():
            return f"{len(self.side.unconfirmed())} message(s) not confirmed to {self.side.surface}"
        rows = self.query("SELECT id, kind, state, chat_id FROM outbox WHERE state IN ('pending', 'sending')")
        if rows:
            return f"outbox rows still open: {rows[:5]}"
        running = self.query("SELECT id, session_id FROM runs WHERE status = 'running'")
        if running:
            return f"runs still running: {running}"
        waiting = [chat.label for chat in CHATS if not self.taken_up(chat)]
        if waiting:
            return f"{UNTAKEN} {', '.join(waiting)}"
        return None

    async def wait_quiet(self) -> None:
        """Until nothing is left to do; or until all that is left is messages no run takes up, which the
        checks then report one by one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + QUIET_WITHIN_S
        since: tuple[str | None, float] = ("", 0.0)
        while True:
            self.alive()
            state = self.busy()
            now = loop.time()
            if state != since[0]:
                since = (state, now)
            if state is None and now - since[1] >= QUIET_FOR_S:
                return
            if state is not None and state.startswith(UNTAKEN) and now - since[1] >= STUCK_FOR_S:
                return
            if state is not None and now > deadline:
                raise AssertionError(
                    f"the last clean start did not settle within {QUIET_WITHIN_S:g} s: {state}\n"
                    f"{self.log_tail()}"
                )
            await asyncio.sleep(0.05)

    async def until(self, check: Callable[[], bool], within: float, what: str | None) -> bool:
        """Wait for check(); after `within` s fail with `what`, or (what None) just return False."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not check():
            self.alive()
            if loop.time() > deadline:
                if what is None:
                    return False
                raise AssertionError(
                    f"{what}: not within {within:g} s while bridge run was up\n{self.log_tail()}"
                )
            await asyncio.sleep(0.005)
        return True
