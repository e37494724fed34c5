"""Rounds of Bridge then nanobot (or the other way round), their figures side by side, the median ratio."""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import bpe_openai

from bench.common import table, write_results
from devkit.instant_model import instant_model

ROOT = Path(__file__).parent.parent.parent
# What `.ci/run` installs, and where; BRIDGE_NANOBOT names another environment's python.
NANOBOT_PIP = "nanobot-ai==0.3.5"
DEFAULT_NANOBOT = Path.home() / ".cache/bridge/nanobot-venv/bin/python"
TARGET_RATIO = 25
ROUNDS, CHATS, WARM_S, WINDOW_S = 5, 50, 2.0, 10.0
SMOKE_ROUNDS, SMOKE_CHATS, SMOKE_WARM_S, SMOKE_WINDOW_S = 1, 3, 0.3, 1.0


def nanobot_python(named: str | None = None) -> str | None:
    """The python of an environment with nanobot installed, or None. An environment's folder names
    its bin/python (a venv is easier to name than its interpreter)."""
    python = Path(named or os.environ.get("BRIDGE_NANOBOT") or str(DEFAULT_NANOBOT))
    if python.is_dir():
        python = python / "bin" / "python"
    return str(python) if python.is_file() else None


def missing_note() -> str:
    venv = "~/.cache/bridge/nanobot-venv"
    return (
        "nanobot is not installed, so only Bridge's side was measured. Make its environment with: "
        f"python3 -m venv {venv} && {venv}/bin/pip install '{NANOBOT_PIP}'"
    )


# nanobot counts tokens with tiktoken's cl100k_base, which tiktoken downloads on first use. Offline,
# every count tries again and blocks the event loop on DNS (about 100 ms a turn); with a network the
# file is cached once. So the file is put in tiktoken's cache from the copy bpe-openai ships.
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def tiktoken_cache(folder: Path) -> Path:
    """A TIKTOKEN_CACHE_DIR holding cl100k_base under the name tiktoken looks for."""
    data = gzip.decompress((Path(bpe_openai.__file__).parent / "data/cl100k_base.tiktoken.gz").read_bytes())
    (folder / hashlib.sha1(CL100K_URL.encode()).hexdigest()).write_bytes(data)
    return folder


async def side(
    python: str, module: str, model: str, chats: int, warm: float, window: float, cache: Path
) -> dict[str, Any]:
    """One side's run in a process of its own; its figures line."""
    with tempfile.TemporaryDirectory() as folder:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "NO_PROXY": "127.0.0.1,localhost",
            "TIKTOKEN_CACHE_DIR": str(cache),
        }
        process = await asyncio.create_subprocess_exec(
            python, "-m", module, "--model", model, "--chats", str(chats), "--warm", str(warm),
            "--window", str(window), "--folder", folder,
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
    lines = [line for line in out.decode().splitlines() if line.startswith("figures ")]
    if process.returncode or not lines:
        raise RuntimeError(f"{module} failed ({process.returncode}): {err.decode()[-3000:]}")
    figures: dict[str, Any] = json.loads(lines[-1].removeprefix("figures "))
    return figures


async def measure(
    nanobot: str | None, rounds: int, chats: int, warm: float, window: float
) -> list[dict[str, Any]]:
    sides = [(sys.executable, "bench.versus.bridge_side")]
    if nanobot:
        sides.append((nanobot, "bench.versus.nanobot_side"))
    with tempfile.TemporaryDirectory() as cache:
        return await _rounds(sides, rounds, chats, warm, window, tiktoken_cache(Path(cache)))


async def _rounds(
    sides: list[tuple[str, str]], rounds: int, chats: int, warm: float, window: float, cache: Path
) -> list[dict[str, Any]]:
    results = []
    async with instant_model() as model:
        for number in range(rounds):
            # Odd rounds go the other way round, so that a machine getting busier favours neither.
            order = sides if number % 2 == 0 else sides[::-1]
            taken = [
                await side(python, module, model, chats, warm, window, cache) for python, module in order
            ]
            figures = {f["side"]: f for f in taken}
            bridge, other = figures["bridge"], figures.get("nanobot")
            ratio = round(bridge["turns_per_s"] / other["turns_per_s"], 1) if other else None
            results.append({"round": number + 1, "bridge": bridge, "nanobot": other, "ratio": ratio})
    return results


HEADERS = ["round", "Bridge turns/s", "nanobot turns/s", "×", "Bridge CPU ms/turn", "nanobot CPU ms/turn",
           "Bridge p99 ms", "nanobot p99 ms"]  # fmt: skip


def row(result: dict[str, Any]) -> list[Any]:
    """One round as the table prints it; a dash for nanobot's figures where it was not measured."""
    bridge, other = result["bridge"], result["nanobot"] or {}
    figures = ("turns_per_s", "cpu_ms_per_turn", "turn_p99_ms")
    mine, theirs = ([side.get(name, "—") for name in figures] for side in (bridge, other))
    return [
        result["round"],
        mine[0],
        theirs[0],
        result["ratio"] or "—",
        mine[1],
        theirs[1],
        mine[2],
        theirs[2],
    ]


async def run(
    smoke: bool = False,
    *,
    nanobot: str | None = None,
    rounds: int = ROUNDS,
    chats: int = CHATS,
    warm: float = WARM_S,
    window: float = WINDOW_S,
) -> dict[str, Any]:
    if smoke:
        rounds, chats, warm, window = SMOKE_ROUNDS, SMOKE_CHATS, SMOKE_WARM_S, SMOKE_WINDOW_S
    python = nanobot_python(nanobot)
    if python is None:
        print(missing_note())
    results = await measure(python, rounds, chats, warm, window)
    title = (
        f"Bridge against nanobot 0.3.5: {chats} chats in a closed loop, a {window:g} s window each, "
        "each turn a tool call then a reply from the instant model over HTTP"
    )
    print(table(title, HEADERS, [row(result) for result in results]))
    ratios = [r["ratio"] for r in results if r["ratio"]]
    median = statistics.median(ratios) if ratios else None
    data: dict[str, Any] = {"rounds": results, "median_ratio": median}
    if median is not None:
        data["targets"] = {f"ratio_at_least_{TARGET_RATIO}": median >= TARGET_RATIO}
        print(f"median ratio {median}×; targets: {data['targets']}\n")
    write_results("versus_nanobot", data, smoke=smoke)
    return data


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true", help="one short round of 3 chats")
    parser.add_argument(
        "--nanobot", help=f"the python of nanobot's environment, or its folder (default: {DEFAULT_NANOBOT})"
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--chats", type=int, default=CHATS)
    parser.add_argument("--warm", type=float, default=WARM_S, help="seconds before each window opens")
    parser.add_argument("--window", type=float, default=WINDOW_S, help="seconds counted per side and round")


def main(args: argparse.Namespace) -> None:
    asyncio.run(
        run(
            args.smoke,
            nanobot=args.nanobot,
            rounds=args.rounds,
            chats=args.chats,
            warm=args.warm,
            window=args.window,
        )
    )
