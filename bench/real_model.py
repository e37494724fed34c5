"""Real-model evaluation: scripted multi-turn chats through the whole Bridge against a live model server."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from bench import stream_latency
from bench.common import table, write_results
from bridge.app import Bridge
from bridge.config import Settings
from bridge.events import Inbound, Outbound, Route
from bridge.localmodel import DEFAULT_PORT, MODEL_ALIAS, LocalModel, Mode, Running, is_local_model_url
from bridge.platform import Sender
from bridge.store.base import RunRow
from bridge.tools.registry import normalize_group_name

DEFAULT_BASE_URL = f"http://127.0.0.1:{DEFAULT_PORT}/v1"
MODES: tuple[Mode, ...] = ("native", "text")
# A first request with the whole prompt takes ~13 s on 2 cores, a warm turn 1-3 s; a turn of several
# tool calls on a cold cache stays well inside this.
TURN_TIMEOUT_S = 240.0
SURFACE = "bench"
OWNER = "owner"
# The owner's DMs are the `main` session, which the sessions tools may read.
SESSION_KEY = "main"
# The local model has 8k tokens of context (see bridge.cli.serve.with_local_model).
HISTORY_MAX_CHARS = 16_000


@dataclass(frozen=True, slots=True)
class Fact:
    """Something a turn must get right: a regex (case-insensitive) on its answer, or on a workspace file."""

    label: str
    pattern: str
    file: str | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """One user message, and the facts (computed when the turn ends: the time moves) it must deliver."""

    text: str
    facts: Callable[[], tuple[Fact, ...]] = lambda: ()


def hour_pattern(zone: str, at: datetime | None = None) -> str:
    """A clock time in `zone` within an hour of now (a turn may straddle the hour), 24- or 12-hour form."""
    now = (at or datetime.now(UTC)).astimezone(ZoneInfo(zone))
    forms = []
    for hour in sorted({(now.hour + delta) % 24 for delta in (-1, 0, 1)}):
        half = "pm" if hour >= 12 else "am"
        # ':' and digits may not precede it: "T14:05:33" matches 14:05, never 05:33.
        forms.append(rf"(?<![\d:])0?{hour}:[0-5]\d(?!\s*[ap]\.?m)")
        forms.append(rf"(?<![\d:]){hour % 12 or 12}(?::[0-5]\d)?\s*{half[0]}\.?{half[1]}\b")
    return "|".join(forms)


def clock(label: str, zone: str) -> Callable[[], tuple[Fact, ...]]:
    return lambda: (Fact(label, hour_pattern(zone)),)


def clocks(*zones: tuple[str, str]) -> Callable[[], tuple[Fact, ...]]:
    return lambda: tuple(Fact(label, hour_pattern(zone)) for label, zone in zones)


def facts(*items: Fact) -> Callable[[], tuple[Fact, ...]]:
    return lambda: items


# Groups loaded in one turn and used in later ones; files written in one turn and read in the next;
# the time in two zones. Each scenario is one fresh chat (its own database and workspace).
SCENARIOS: dict[str, list[Turn]] = {
    "groups": [
        Turn("Load the sessions tools and list my sessions.", facts(Fact("lists main", r"\bmain\b"))),
        Turn("How many chat sessions do I have?", facts(Fact("one session", r"\b(1|one)\b"))),
        Turn("List my sessions once more.", facts(Fact("lists main", r"\bmain\b"))),
    ],
    "files": [
        Turn(
            "Write a file notes.txt containing: the launch code is 4711",
            facts(Fact("notes.txt on disk", r"4711", file="notes.txt")),
        ),
        Turn("What does notes.txt say?", facts(Fact("reads 4711", r"4711"))),
    ],
    "time": [
        Turn(
            "What time is it in Tokyo and in New York?",
            clocks(("Tokyo time", "Asia/Tokyo"), ("New York time", "America/New_York")),
        ),
        Turn("And in London?", clock("London time", "Europe/London")),
    ],
    "mixed": [
        Turn(
            "Save a file todo.txt with the text: buy milk",
            facts(Fact("todo.txt on disk", r"buy milk", file="todo.txt")),
        ),
        Turn("What time is it in UTC?", clock("UTC time", "UTC")),
        Turn("Read todo.txt back to me.", facts(Fact("reads milk", r"milk"))),
    ],
}


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
        agent={"history_max_chars": HISTORY_MAX_CHARS, "run_timeout_s": config.turn_timeout_s - 10},
    )


async def play_turn(
    bridge: Bridge, sender: ReplyRecorder, workspace: Path, number: int, turn: Turn, timeout_s: float
) -> dict[str, Any]:
    """Send one message, wait for its answer, and check the turn's facts."""
    before = len(sender.replies)
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
    reply = "\n".join(sender.replies[before:])
    call_shaped = is_call_shaped(reply, tool_names(bridge))
    checked = [check_fact(fact, reply, workspace, call_shaped) for fact in turn.facts()]
    return {
        "text": turn.text,
        "reply": reply,
        "seconds": round(time.perf_counter() - started, 2),
        "timed_out": timed_out,
        "call_shaped": call_shaped,
        "facts": checked,
    }


def tool_names(bridge: Bridge) -> set[str]:
    registry = bridge.registry
    groups = registry.groups()
    return {t.name for t in registry.core_tools()} | {t.name for g in groups for t in g.tools}


def is_call_shaped(reply: str, names: Collection[str]) -> bool:
    """A reply that writes out a tool call (fenced JSON, `name(...)`) instead of answering.

    Small models do this; such a reply scores no answer facts even when it happens to hold one
    (`search_history(query: "main")` is not an answer that lists the session main).
    """
    if "```" in reply or re.search(r'"(tool_)?name"\s*:', reply):
        return True
    return any(re.search(rf"\b{re.escape(name)}\s*\(", reply) for name in names)


def check_fact(fact: Fact, reply: str, workspace: Path, call_shaped: bool = False) -> dict[str, Any]:
    if fact.file is None:
        found = not call_shaped and re.search(fact.pattern, reply, re.IGNORECASE) is not None
    else:
        path = workspace / fact.file
        text = path.read_text(errors="replace") if path.is_file() else ""
        found = re.search(fact.pattern, text, re.IGNORECASE) is not None
    return {"fact": fact.label, "found": found}


async def turn_traces(bridge: Bridge) -> list[tuple[RunRow, dict[str, Any]]]:
    """The scenario's answering runs, oldest first, each with its trace."""
    runs = await bridge.store.list_runs(session_key=SESSION_KEY, limit=1_000)
    found = []
    for run, _key in reversed(runs):
        if run.kind != "turn":
            continue
        found.append((run, json.loads(await bridge.store.get_trace(run.id) or "{}")))
    return found


def _group_named(arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return ""
    return normalize_group_name(str(arguments.get("group_name", "")))


def tally(runs: list[tuple[RunRow, dict[str, Any]]]) -> dict[str, Any]:
    """Model calls, reloads of a loaded group, unavailable tools and loop stops, from the traces."""
    counts: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    loaded: set[str] = set()
    calls: list[str] = []
    for run, trace in runs:
        for step in trace.get("steps", []):
            if step.get("type") == "model":
                counts["model_calls"] += 1
                continue
            calls.append(f"{step.get('name')}:{step.get('status')}")
            counts[str(step.get("code"))] += step.get("status") == "error"
            if step.get("name") == "load_tool_group":
                group = _group_named(step.get("parsed_arguments"))
                counts["reloads"] += group in loaded
                if step.get("status") == "success":
                    loaded.add(group)
        rule = trace.get("stop_rule") or ("stopped" if run.status == "stopped" else None)
        if rule:
            rules[rule] += 1
        counts["failed_runs"] += run.status not in ("ok", "stopped")
    return {
        "model_calls": counts["model_calls"],
        "reloads": counts["reloads"],
        "not_loaded": counts["not_loaded"],
        "unknown_tool": counts["unknown_tool"],
        "loop_stops": sum(rules.values()),
        "stop_rules": dict(rules),
        "failed_runs": counts["failed_runs"],
        "tool_calls": calls,
    }


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


SUMMED = ("model_calls", "reloads", "not_loaded", "unknown_tool", "loop_stops", "call_replies", "failed_runs")


def totals(mode: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"scenario": "total", "mode": mode}
    for key in (*SUMMED, "facts_found", "facts_expected", "seconds"):
        row[key] = sum(r[key] for r in results)
    row["seconds"] = round(row["seconds"], 1)
    return row


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    headers = ["mode", "scenario", "model calls", "reloads", "not loaded", "unknown tool", "loop stops"]
    headers += ["call replies", "facts", "seconds"]
    cells = [
        [
            r["mode"],
            r["scenario"],
            *(r[k] for k in SUMMED[:6]),
            f"{r['facts_found']}/{r['facts_expected']}",
            r["seconds"],
        ]
        for r in rows
    ]
    print(table(title, headers, cells))


# -- the server ----------------------------------------------------------------------------------


class LocalServer:
    """Switches the local model server between tool modes, and puts it back as it was found."""

    def __init__(self, base_url: str) -> None:
        self.manager = LocalModel()
        self.port = _port(base_url)
        self.found: Running | None = self.manager.running()

    def use(self, mode: Mode) -> None:
        """Native mode needs the jsonfence chat template, text mode the stock one: a restart each."""
        self.manager.start(port=self.port, mode=mode)

    def restore(self) -> None:
        if self.found is None:
            self.manager.stop()
        else:
            self.manager.start(port=self.found.port, mode=self.found.mode)


def _port(base_url: str) -> int:
    return httpx.URL(base_url).port or DEFAULT_PORT


async def reachable(base_url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            return (await client.get(f"{base_url.rstrip('/')}/models")).status_code < 500
    except httpx.HTTPError:
        return False


# -- the run -------------------------------------------------------------------------------------


async def evaluate(
    base_url: str,
    model: str,
    modes: Sequence[Mode],
    names: Sequence[str],
    *,
    repeat: int = 1,
    temperature: float | None = 0.0,
    keep: Path | None = None,
    scenarios: dict[str, list[Turn]] | None = None,
    manage_server: bool | None = None,
) -> dict[str, Any]:
    """Every chosen scenario in every mode, `repeat` times; prints the tables, writes the JSON.

    Against the local model server (by default, when base_url is its address) each mode gets the
    server restarted in that mode, and the server is left as it was found.
    """
    scenarios = scenarios or SCENARIOS
    if manage_server is None:
        manage_server = is_local_model_url(base_url)
    local = LocalServer(base_url) if manage_server else None
    by_mode: dict[str, Any] = {}
    try:
        for mode in modes:
            if local is not None:
                await asyncio.to_thread(local.use, mode)
            elif not await reachable(base_url):
                raise SystemExit(
                    f"bench: no model server answers at {base_url}; start one, or pass --base-url"
                )
            config = EvalConfig(base_url, model, mode, temperature, keep=keep)
            results = [
                await run_scenario(name, scenarios[name], config) for _ in range(repeat) for name in names
            ]
            by_mode[mode] = {"totals": totals(mode, results), "scenarios": results}
            print_table(f"Real model {model}, {mode} tool calls", [*results, by_mode[mode]["totals"]])
            print()
    finally:
        if local is not None:
            await asyncio.to_thread(local.restore)
    return {
        "model": model,
        "base_url": base_url,
        "temperature": temperature,
        "repeat": repeat,
        "turn_timeout_s": TURN_TIMEOUT_S,
        "scenarios": {name: [turn.text for turn in scenarios[name]] for name in names},
        "modes": by_mode,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m bench real-model`."""
    parser.add_argument("--base-url", default=DEFAULT_BASE_URL, help="OpenAI-compatible server (/v1)")
    parser.add_argument("--model", default=MODEL_ALIAS, help="model name sent with each request")
    parser.add_argument("--tool-mode", choices=[*MODES, "both"], default="both")
    parser.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    parser.add_argument("--repeat", type=int, default=1, help="play every scenario N times")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0)")
    parser.add_argument("--keep", type=Path, help="keep each scenario's database here, for `bridge trace`")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    modes: list[Mode] = list(MODES) if args.tool_mode == "both" else [args.tool_mode]
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    data = await evaluate(
        args.base_url,
        args.model,
        modes,
        args.scenarios,
        repeat=max(1, args.repeat),
        temperature=args.temperature,
        keep=args.keep,
    )
    data["streaming"] = await streaming_latency(args.base_url, args.model, max(1, args.repeat))
    print(f"JSON: {write_results('real_model', data)}")
    return data


async def streaming_latency(base_url: str, model: str, repeat: int) -> dict[str, Any]:
    """Time to the first visible word and to the whole reply, streamed against not (native mode)."""
    local = LocalServer(base_url) if is_local_model_url(base_url) else None
    try:
        if local is not None:
            await asyncio.to_thread(local.use, "native")
        return await stream_latency.measure(base_url, model, repeat=repeat)
    finally:
        if local is not None:
            await asyncio.to_thread(local.restore)
