"""Real-model evaluation: scripted multi-turn chats through the whole Bridge against a live model server.

`scenarios` holds what is asked (the chats, and the newcomer's first questions), `playing` plays a chat
through a Bridge, `scoring` counts and scores it. By default the bench runs the local model server
(`bridge local-model`), restarted for each model and tool mode and left as it was found.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

import httpx

from bench import stream_latency
from bench.common import write_results
from bench.real_model.playing import TURN_TIMEOUT_S, EvalConfig, run_scenario
from bench.real_model.scenarios import SCENARIOS, SETS, Turn, hour_pattern
from bench.real_model.scoring import by_question, is_call_shaped, print_questions, print_table, totals
from bridge.config.agent import LastRequest
from bridge.localmodel import (
    DEFAULT_MODEL,
    DEFAULT_PORT,
    MODEL_ALIAS,
    MODELS,
    LocalModel,
    Mode,
    Running,
    is_local_model_url,
)

DEFAULT_BASE_URL = f"http://127.0.0.1:{DEFAULT_PORT}/v1"
MODES: tuple[Mode, ...] = ("native", "text")
SHAPES: tuple[LastRequest, ...] = get_args(LastRequest)


class LocalServer:
    """Switches the local model server between models and tool modes, and puts it back as it was found."""

    def __init__(self, base_url: str) -> None:
        self.manager = LocalModel()
        self.port = httpx.URL(base_url).port or DEFAULT_PORT
        self.found: Running | None = self.manager.running()

    def use(self, mode: Mode, model: str = DEFAULT_MODEL) -> None:
        """Native mode needs the jsonfence chat template, text mode the stock one: a restart each."""
        self.manager.start(port=self.port, mode=mode, model=model)

    def restore(self) -> None:
        if self.found is None:
            self.manager.stop()
        else:
            self.manager.start(port=self.found.port, mode=self.found.mode, model=self.found.model)


async def reachable(base_url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            return (await client.get(f"{base_url.rstrip('/')}/models")).status_code < 500
    except httpx.HTTPError:
        return False


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
    local_models: Sequence[str] = (DEFAULT_MODEL,),
    shapes: Sequence[LastRequest] = ("history",),
) -> dict[str, Any]:
    """Every chosen scenario for each model, tool mode and last-request shape, `repeat` times; prints
    the tables and returns the figures.

    Against the local model server (by default, when base_url is its address) each of `local_models`
    is run in each mode, the server restarted for each, and left as it was found; otherwise `model` is
    asked at base_url.
    """
    scenarios = scenarios or SCENARIOS
    if manage_server is None:
        manage_server = is_local_model_url(base_url)
    local = LocalServer(base_url) if manage_server else None
    runs: list[dict[str, Any]] = []
    try:
        for local_model in local_models if local is not None else [None]:
            asked = MODELS[local_model].alias if local_model is not None else model
            for mode in modes:
                if local is not None:
                    await asyncio.to_thread(local.use, mode, local_model or DEFAULT_MODEL)
                elif not await reachable(base_url):
                    raise SystemExit(
                        f"bench: no model server answers at {base_url}; start one, or pass --base-url"
                    )
                for shape in shapes:
                    config = EvalConfig(base_url, asked, mode, temperature, keep=keep, last_request=shape)
                    results = [
                        await run_scenario(name, scenarios[name], config)
                        for _ in range(repeat)
                        for name in names
                    ]
                    run: dict[str, Any] = {
                        "model": asked,
                        "last_request": shape,
                        "mode": mode,
                        "totals": totals(mode, results),
                        "questions": by_question(results),
                        "scenarios": results,
                    }
                    runs.append(run)
                    title = f"Real model {asked}, {mode} tool calls, last request: {shape}"
                    print_table(title, [*results, run["totals"]])
                    if run["questions"]:
                        print_questions(f"{title}, by question", run["questions"])
                    print()
    finally:
        if local is not None:
            await asyncio.to_thread(local.restore)
    return {
        "base_url": base_url,
        "temperature": temperature,
        "repeat": repeat,
        "turn_timeout_s": TURN_TIMEOUT_S,
        "scenarios": {name: [turn.text for turn in scenarios[name]] for name in names},
        "runs": runs,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m bench real-model`."""
    parser.add_argument("--base-url", default=DEFAULT_BASE_URL, help="OpenAI-compatible server (/v1)")
    parser.add_argument(
        "--model", default=MODEL_ALIAS, help="model name sent with each request (a server of your own)"
    )
    parser.add_argument(
        "--local-models",
        nargs="+",
        choices=list(MODELS),
        default=[DEFAULT_MODEL],
        metavar="NAME",
        help=f"the local models to run, one after the other (default {DEFAULT_MODEL}; {', '.join(MODELS)})",
    )
    parser.add_argument("--tool-mode", choices=[*MODES, "both"], default="both")
    parser.add_argument(
        "--last-request",
        choices=[*SHAPES, "both"],
        default="history",
        help="[agent.loops] last_request: how a run cut short asks for its answer",
    )
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), help="the chats to play")
    chosen.add_argument("--set", choices=list(SETS), default="all", help="a named set of chats (default all)")
    parser.add_argument("--repeat", type=int, default=1, help="play every scenario N times")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0)")
    parser.add_argument("--keep", type=Path, help="keep each scenario's database here, for `bridge trace`")
    parser.add_argument("--no-streaming", action="store_true", help="skip the streaming latency figures")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    modes: list[Mode] = list(MODES) if args.tool_mode == "both" else [args.tool_mode]
    shapes: list[LastRequest] = list(SHAPES) if args.last_request == "both" else [args.last_request]
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    data = await evaluate(
        args.base_url,
        args.model,
        modes,
        args.scenarios or SETS[args.set],
        repeat=max(1, args.repeat),
        temperature=args.temperature,
        keep=args.keep,
        local_models=args.local_models,
        shapes=shapes,
    )
    if not args.no_streaming:
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


__all__ = [
    "DEFAULT_BASE_URL",
    "SCENARIOS",
    "EvalConfig",
    "add_arguments",
    "evaluate",
    "hour_pattern",
    "is_call_shaped",
    "main",
    "run_scenario",
]
