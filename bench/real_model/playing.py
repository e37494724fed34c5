"""Plays a scripted chat through a whole Bridge against a live model server, turn by turn."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.real_model.scenarios import Turn
from bench.real_model.scoring import check_fact, is_call_shaped, tally
from bridge.app import Bridge
from bridge.config import Settings
from bridge.config.agent import LastRequest
from bridge.events import Inbound, Outbound, Route
from bridge.localmodel import Mode
from bridge.platform import Sender
from bridge.store.base import RunRow

# A first request with the whole prompt takes ~13 s on 2 cores, a warm turn 1-3 s; a turn of several
# tool calls on a cold cache stays well inside this.
TURN_TIMEOUT_S = 240.0
SURFACE = "bench"
OWNER = "owner"
# The owner's DMs are the `main` session, which the sessions tools may read.
SESSION_KEY = "main"
# The local model has 8k tokens of context (see bridge.cli.serve.with_local_model).
HISTORY_MAX_CHARS = 16_000


@dataclass
class ReplyRecorder(Sender):
    """A Sender that keeps the replies; tool activity and notices are dropped."""

    surface: str = SURFACE
    supports_edit: bool = True
    replies: list[str] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    async def send(self, item: Outbound) -> str | None:
        if item.kind == "reply":
            self.replies.append(item.text)
        return str(next(self._ids))

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        return None

    async def typing(self, route: Route) -> None:
        return None


@dataclass(frozen=True, slots=True)
class EvalConfig:
    """Where the model is and how each run is set up."""

    base_url: str
    model: str
    mode: Mode
    temperature: float | None = 0.0
    turn_timeout_s: float = TURN_TIMEOUT_S
    # Keep each scenario's data folder (database, workspace) here, for `bridge trace`; None: deleted.
    keep: Path | None = None
    # [agent.loops] last_request: how a run cut short asks for its answer.
    last_request: LastRequest = "history"


def settings_for(folder: Path, config: EvalConfig) -> Settings:
    llm: dict[str, Any] = {
        "base_url": config.base_url,
        "model": config.model,
        "tool_mode": config.mode,
        "timeout_s": 180,
        "max_retries": 1,
        # A 0.5B model sometimes writes on until the timeout; no answer here needs more.
        "max_tokens": 512,
    }
    if config.temperature is not None:
        llm["temperature"] = config.temperature
    return Settings(
        owners=[f"{SURFACE}:{OWNER}"],
        llm=llm,
        storage={"path": str(folder / "bridge.db")},
        tools={"workspace": str(folder / "workspace")},
        # The runner's own deadline ends a stuck turn before the bench's does.
        agent={
            "history_max_chars": HISTORY_MAX_CHARS,
            "run_timeout_s": config.turn_timeout_s - 10,
            "loops": {"last_request": config.last_request},
        },
    )


async def newest_run(bridge: Bridge) -> tuple[RunRow, dict[str, Any]] | None:
    """The chat's newest answering run, with its trace."""
    runs = await bridge.store.list_runs(session_key=SESSION_KEY, limit=5)
    run = next((run for run, _key in runs if run.kind == "turn"), None)
    if run is None:
        return None
    return run, json.loads(await bridge.store.get_trace(run.id) or "{}")


async def play_turn(
    bridge: Bridge, sender: ReplyRecorder, workspace: Path, number: int, turn: Turn, timeout_s: float
) -> dict[str, Any]:
    """Send one message, wait for its answer, and check the turn's facts and its run."""
    before = len(sender.replies)
    earlier = await newest_run(bridge)
    started = time.perf_counter()
    inbound = Inbound(SURFACE, "dm", OWNER, OWNER, turn.text, message_id=str(number))
    done = await bridge.handle(inbound)
    timed_out = False
    if done is not None:
        try:
            await asyncio.wait_for(done, timeout_s)
        except TimeoutError:
            timed_out = True
    await bridge.delivery.idle()
    seconds = round(time.perf_counter() - started, 2)
    reply = "\n".join(sender.replies[before:])
    call_shaped = is_call_shaped(reply, tool_names(bridge))
    memories = await bridge.store.memories(SESSION_KEY, 100)
    checked = [check_fact(fact, reply, workspace, call_shaped, memories) for fact in turn.facts()]
    latest = await newest_run(bridge)
    own = [] if latest is None or (earlier and earlier[0].id == latest[0].id) else [latest]
    counted = tally(own)
    return {
        "text": turn.text,
        "label": turn.label,
        "reply": reply,
        "seconds": seconds,
        "timed_out": timed_out,
        "call_shaped": call_shaped,
        "facts": checked,
        "model_calls": counted["model_calls"],
        "stop_rule": next(iter(counted["stop_rules"]), None),
        # A run cut short answers in the model's words, or failing that in Bridge's (the tool's result).
        "answered_from": own[0][1].get("answered_from", "model") if own else None,
        "tool_calls": counted["tool_calls"],
    }


def tool_names(bridge: Bridge) -> set[str]:
    registry = bridge.registry
    groups = registry.groups()
    return {t.name for t in registry.core_tools()} | {t.name for g in groups for t in g.tools}


async def turn_traces(bridge: Bridge) -> list[tuple[RunRow, dict[str, Any]]]:
    """The scenario's answering runs, oldest first, each with its trace."""
    runs = await bridge.store.list_runs(session_key=SESSION_KEY, limit=1_000)
    found = []
    for run, _key in reversed(runs):
        if run.kind != "turn":
            continue
        found.append((run, json.loads(await bridge.store.get_trace(run.id) or "{}")))
    return found


async def run_scenario(name: str, turns: Sequence[Turn], config: EvalConfig) -> dict[str, Any]:
    """One scenario in a fresh data folder: every turn played, then scored from the store."""
    folder = Path(tempfile.mkdtemp(prefix=f"bridge-eval-{name}-"))
    started = time.perf_counter()
    try:
        sender = ReplyRecorder()
        async with Bridge(settings_for(folder, config)) as bridge:
            bridge.add_sender(sender)
            played = [
                await play_turn(bridge, sender, folder / "workspace", n, turn, config.turn_timeout_s)
                for n, turn in enumerate(turns)
            ]
            runs = await turn_traces(bridge)
        checked = [fact for turn in played for fact in turn["facts"]]
        result = {
            "scenario": name,
            "mode": config.mode,
            **tally(runs),
            "call_replies": sum(turn["call_shaped"] for turn in played),
            "facts_found": sum(fact["found"] for fact in checked),
            "facts_expected": len(checked),
            "seconds": round(time.perf_counter() - started, 1),
            "turns": played,
        }
    finally:
        if config.keep is not None:
            shutil.copytree(folder, config.keep / f"{config.mode}-{name}-{time.time_ns()}")
        shutil.rmtree(folder, ignore_errors=True)
    return result
