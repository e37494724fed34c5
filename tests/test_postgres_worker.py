"""One Bridge process per PostgreSQL database until workers coordinate: the second is refused, clearly."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.scripted_model import HistoryTrustingModel
from devkit.processes import start_bridge
from tests.pg import PostgresServer
from tests.test_cli import bridge, write_config
from tests.test_cli_migrate import on_postgres


async def wait_for_line(stream: asyncio.StreamReader, text: str) -> None:
    async with asyncio.timeout(20):
        while text.encode() not in await stream.readline():
            pass


async def test_a_second_process_on_the_same_database_is_refused_until_the_first_is_killed(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    async with FakeOpenAI(HistoryTrustingModel()) as fake:
        config = on_postgres(write_config(tmp_path, fake.base_url), postgres.database())
        first = await start_bridge(tmp_path, "chat", "--config", str(config), stdin=True)
        try:
            assert first.stdin is not None and first.stdout is not None
            first.stdin.write(b"hello\n")
            await first.stdin.drain()
            await wait_for_line(first.stdout, "bridge")  # it answered: it holds the database

            second = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("hi",))
            assert second.code == 1
            assert "another Bridge process is already running on database postgresql://" in second.stderr
            assert "run `bridge run` to stand by" in second.stderr

            # kill -9: the server drops its connection, and its lock with it, at once.
            first.send_signal(signal.SIGKILL)
            await first.wait()
        finally:
            if first.returncode is None:
                first.kill()
                await first.wait()
        third = await bridge("chat", "--config", str(config), cwd=tmp_path, lines=("back again",))
    assert third.code == 0, third.output
