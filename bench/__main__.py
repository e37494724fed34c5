"""`python -m bench [--smoke] [--only NAME ...]`, or `python -m bench real-model`: figures, printed, saved."""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench import (
    http_throughput,
    idle_worker,
    memory,
    memory_search,
    real_model,
    restore_cost,
    round_trips,
    scale,
    schema_tokens,
    telegram_turn,
    throughput,
)
from bench.common import RESULTS, machine
from bench.versus import compare as versus

BENCHMARKS: dict[str, Callable[[bool], Awaitable[dict[str, Any]]]] = {
    "schema_tokens": schema_tokens.run,
    "restore_cost": restore_cost.run,
    "throughput": throughput.run,
    "http_throughput": http_throughput.run,
    "memory": memory.run,
    "round_trips": round_trips.run,
    "scale": scale.run,
    "telegram_turn": telegram_turn.run,
    "idle_worker": idle_worker.run,
}


async def main(names: list[str], smoke: bool) -> None:
    facts = machine()
    print(f"machine: {facts['processor']}, {facts['cpus']} CPUs, {facts['system']}, Python {facts['python']}")
    print(f"mode: {'smoke (tiny sizes, results in *.smoke.json)' if smoke else 'full'}\n")
    started = time.perf_counter()
    for name in names:
        began = time.perf_counter()
        await BENCHMARKS[name](smoke)
        print(f"[{name}: {time.perf_counter() - began:.1f} s]\n")
    print(f"all done in {time.perf_counter() - started:.1f} s; JSON in {RESULTS}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: proves the benchmarks still run")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS))
    # Not one of the benchmarks run by default: it needs a running model server, and takes minutes.
    commands = parser.add_subparsers(dest="command", metavar="real-model | memory-search | nanobot")
    real_model.add_arguments(
        commands.add_parser(
            "real-model",
            help="scripted chats against a real model server (the local model by default)",
            description=real_model.__doc__,
        )
    )
    # Nor this one: it writes a million messages first (minutes).
    memory_search.add_arguments(
        commands.add_parser(
            "memory-search",
            help="search_history's latency per scope at 1M messages",
            description=memory_search.__doc__,
        )
    )
    # Nor this one: it needs nanobot's environment, and takes about 2 minutes.
    versus.add_arguments(
        commands.add_parser(
            "nanobot",
            help="Bridge against nanobot 0.3.5 on the same workload, round by round",
            description=versus.__doc__,
        )
    )
    args = parser.parse_args()
    # Every figure is taken on 127.0.0.1 or in process; a proxy must never sit in between.
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    if args.command == "real-model":
        asyncio.run(real_model.main(args))
    elif args.command == "memory-search":
        memory_search.main(args)
    elif args.command == "nanobot":
        versus.main(args)
    else:
        asyncio.run(main(args.only, args.smoke))
