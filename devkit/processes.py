"""Running the real `bridge` console script as a subprocess, in a clean environment."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

_BRIDGE_SCRIPT = Path(sys.executable).parent / "bridge"


def bridge_command(*args: str) -> list[str]:
    """The installed console script when it sits next to this interpreter (the venv), else -m."""
    if _BRIDGE_SCRIPT.is_file():
        return [str(_BRIDGE_SCRIPT), *args]
    return [sys.executable, "-m", "bridge", *args]


def bridge_env(**extra: str) -> dict[str, str]:
    """This environment without any BRIDGE_* settings, plus `extra`."""
    env = {name: value for name, value in os.environ.items() if not name.upper().startswith("BRIDGE_")}
    # httpx honours proxy variables even for loopback; keep requests to the fakes off any proxy.
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", PYTHONIOENCODING="utf-8")
    env.update(extra)
    return env


@contextlib.asynccontextmanager
async def bridge_running(cwd: Path, config: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """`bridge run --config CONFIG` for the block, then SIGTERM and a clean exit (killed if it hangs)."""
    process = await start_bridge(cwd, "run", "--config", str(config))
    try:
        yield process
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)
    finally:
        if process.returncode is None:
            process.kill()


@contextlib.asynccontextmanager
async def bridge_process(cwd: Path, config: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """`bridge run --config CONFIG` for the block, which ends it as it likes (kill9, SIGTERM); killed
    if it is still running when the block ends, so a failing test never leaves a process behind."""
    process = await start_bridge(cwd, "run", "--config", str(config))
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def kill9(process: asyncio.subprocess.Process) -> None:
    """SIGKILL, as a crash or the OOM killer: no cleanup of any kind."""
    process.kill()
    await process.wait()


async def start_bridge(cwd: Path, *args: str, stdin: bool = False, **env: str) -> asyncio.subprocess.Process:
    """Start `bridge ARGS` in cwd with piped stdout and stderr (and stdin when asked)."""
    return await asyncio.create_subprocess_exec(
        *bridge_command(*args),
        stdin=asyncio.subprocess.PIPE if stdin else None,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=bridge_env(**env),
    )


def telegram_run_config(
    tmp_path: Path,
    owner: int,
    token: str,
    api_base: str,
    llm_url: str,
    extra: str = "",
    *,
    stream: bool = True,
) -> Path:
    """A config.toml in tmp_path for `bridge run` on Telegram: one owner, the fake model, `extra` TOML."""
    config = tmp_path / "config.toml"
    config.write_text(
        f'owners = ["telegram:{owner}"]\n'
        f'[llm]\nbase_url = "{llm_url}"\nmodel = "fake"\nmax_retries = 0\nstream = {str(stream).lower()}\n'
        f'[storage]\npath = "{tmp_path / "bridge.db"}"\n'
        f'[telegram]\nenabled = true\ntoken = "{token}"\napi_base = "{api_base}"\npoll_timeout_s = 1\n'
        f"{extra}",
        encoding="utf-8",
    )
    return config
