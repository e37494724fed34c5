"""A real `bridge run` under a flood of half-open connections (issue 30, break 11), with few file
descriptors: 1,034 half-open connections had left /healthz unanswered for 14 s and logged 45,473
"Too many open files". Here a process allowed FD_LIMIT descriptors gets far more half-open
connections than that, keeps answering /healthz, and logs a line about it, not one per connection."""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

import httpx

from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import bridge_command, bridge_env, telegram_run_config
from tests.adapters.conftest import OWNER
from tests.pg import free_port
from tests.rawhttp import HALF_HEADER, SILENT, holding
from tests.waiting import eventually

TOKEN = "a-token-of-the-operator-0123456789"
FD_LIMIT = 256
CAP = 20
FLOOD = 2 * FD_LIMIT


def few_descriptors() -> None:
    """Run in the child before exec: the process may open only FD_LIMIT files and sockets."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


async def healthz(port: int) -> int:
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {TOKEN}"},
        trust_env=False,
        timeout=5,
    ) as client:
        return (await client.get("/healthz")).status_code


async def test_a_flood_of_half_open_connections_leaves_healthz_answering_and_the_log_short(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    port = free_port()
    extra = (
        f'[admin]\nenabled = true\nport = {port}\ntoken = "{TOKEN}"\n'
        f"max_connections = {CAP}\nheader_timeout_s = 120\n"
    )
    async with FakeOpenAI() as llm:
        config = telegram_run_config(tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, extra)
        process = await asyncio.create_subprocess_exec(
            *bridge_command("run", "--config", str(config)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=tmp_path,
            env=bridge_env(),
            preexec_fn=few_descriptors,
        )
        # Read as it comes, so a flood of log lines can't fill the pipe and stall the process.
        log = bytearray()

        async def read_log() -> None:
            assert process.stdout is not None
            while chunk := await process.stdout.read(65536):
                log.extend(chunk)

        reading = asyncio.create_task(read_log())
        try:
            await tg.wait_for(lambda: tg.open_polls > 0, timeout=30)
            await eventually(lambda: b"admin server on" in log, "the admin server's start")
            assert await healthz(port) == 200
            async with holding(port, [SILENT, HALF_HEADER] * (FLOOD // 2), within=30):
                # Past the process's own descriptors: without a cap these would use them all up,
                # and /healthz would not be let in (5 s timeout).
                assert await healthz(port) == 200
                assert await healthz(port) == 200
            process.terminate()
            assert await asyncio.wait_for(process.wait(), 15) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await reading
    text = log.decode("utf-8", "replace")
    assert "Too many open files" not in text and "out of system resource" not in text, text[-3000:]
    cap_lines = [line for line in text.splitlines() if "open connections" in line]
    assert 1 <= len(cap_lines) <= 2, cap_lines
    assert " ERROR " not in text and '"ERROR"' not in text, text[-3000:]
