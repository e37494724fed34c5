"""`bridge run` workers for the scale benchmark: their config, starting them together, and their CPU."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.scale.cpu import cpu_seconds
from devkit.processes import bridge_env, start_bridge

# Each worker runs up to this many chats at once; the rest wait in the shared intake queue.
MAX_RUNS = 100


def write_config(folder: Path, tg: Any, model_url: str, storage: str) -> Path:
    config = folder / "config.toml"
    config.write_text(
        f'[llm]\nbase_url = "{model_url}"\nmodel = "instant"\n'
        f"[storage]\n{storage}\n"
        f'[telegram]\nenabled = true\ntoken = "{tg.token}"\napi_base = "{tg.api_base}"\n'
        'poll_timeout_s = 1\nallowed_users = ["*"]\n'
        f'[runs]\nqueue_mode = "followup"\nmax_queued = 1000\nmax_concurrent_runs = {MAX_RUNS}\n',
        encoding="utf-8",
    )
    return config


@dataclass
class Workers:
    processes: list[asyncio.subprocess.Process]

    def cpu(self) -> float | None:
        """The workers' CPU seconds so far, together (None where /proc cannot be read)."""
        readings = [cpu_seconds(p.pid) for p in self.processes]
        return None if None in readings else sum(r or 0.0 for r in readings)


@contextlib.asynccontextmanager
async def started_workers(
    folder: Path, config: Path, n: int, *, code: Path | None = None
) -> AsyncIterator[Workers]:
    """`n` `bridge run` processes on `config`, started together, each once it logs that it runs.

    `code`: a folder holding another `bridge` package (an older commit's, the baseline), run instead of
    the installed one."""
    env: dict[str, str] = {}
    args = ["run", "--config", str(config)]
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), *filter(None, [os.environ.get("PYTHONPATH")])])
    processes: list[asyncio.subprocess.Process] = []
    drains: list[asyncio.Task[None]] = []
    try:
        for _ in range(n):
            if code is None:
                processes.append(await start_bridge(folder, *args))
            else:
                processes.append(await _start_module(folder, args, env))
        await asyncio.gather(*(_running(p) for p in processes))
        # The rest of their logs is not read: drained, so a full pipe never holds a worker up.
        drains += [asyncio.create_task(_drain(p)) for p in processes]
        yield Workers(processes)
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
        await asyncio.gather(*drains, return_exceptions=True)


async def _start_module(folder: Path, args: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
    # `python -m bridge`, so PYTHONPATH decides which bridge runs (an installed console script's
    # editable finder could win over it).
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=folder,
        env=bridge_env(**env),
    )


async def _running(process: asyncio.subprocess.Process) -> None:
    assert process.stderr is not None
    said: list[bytes] = []
    async with asyncio.timeout(60):
        while b"running:" not in (line := await process.stderr.readline()):
            said.append(line)
            if not line:
                raise RuntimeError(
                    "bridge run ended before it was running:\n" + b"".join(said[-20:]).decode()
                )


async def _drain(process: asyncio.subprocess.Process) -> None:
    assert process.stderr is not None
    while await process.stderr.read(65536):
        pass
