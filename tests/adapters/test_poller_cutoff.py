"""Never two pollers: a worker that starts just as the polling worker is cut off from the database
waits for that one to stop before it polls (issue 30, break 9).

The polling worker connects as a role of its own, so the test can cut it off from the database alone
(the role may no longer log in, and its connections are ended) while it goes on polling Telegram. It
stops once it cannot show it still holds the polling lock; the other worker, whose start is held
just before it claims that lock until the cut, finds the lock free at once. It must still wait, as a
standing-by worker does: the fake Bot API ends a getUpdates that a newer one overtakes with 409
Conflict, which counts two pollers at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psycopg

from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import start_bridge
from tests.adapters.test_failover import FIRST_USER, Model, Worker, answered, config_for
from tests.pg import PostgresServer


class HeldStart(FakeTelegram):
    """The fake Bot API, holding the next setMyCommands once `hold()` is called. A worker sends it as
    the last step of connecting for sending, just before it claims the polling lock."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = asyncio.Event()
        self.released = asyncio.Event()
        self._armed = False

    def hold(self) -> None:
        self._armed = True

    def _handlers(self) -> Mapping[str, Callable[[dict[str, Any]], Any]]:
        return {**super()._handlers(), "setmycommands": self._held_set_my_commands}

    async def _held_set_my_commands(self, params: dict[str, Any]) -> bool:
        if self._armed:
            self._armed = False
            self.holding.set()
            await self.released.wait()
        return self._set_my_commands(params)


def run_sql(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql.encode())
        return cursor.fetchall() if cursor.description else []


async def test_a_worker_starting_as_the_poller_is_cut_off_from_the_database_never_polls_beside_it(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    url = postgres.database()
    database = url.rsplit("/", 1)[1]
    role = f"poller_{database}"  # roles are the server's, shared by every test's database
    run_sql(postgres.admin_url, f"CREATE ROLE {role} LOGIN SUPERUSER")
    poller_url = url.replace("://bridge@", f"://{role}@")
    (tmp_path / "poller").mkdir()
    (tmp_path / "other").mkdir()
    async with HeldStart() as tg, FakeOpenAI(Model()) as llm:
        poller = Worker(
            await start_bridge(
                tmp_path, "run", "--config", str(config_for(tmp_path / "poller", tg, llm, poller_url))
            )
        )
        other: Worker | None = None
        try:
            await poller.wait_until_said("running: telegram")
            await tg.wait_for(lambda: tg.open_polls == 1, timeout=30)
            tg.hold()
            other = Worker(
                await start_bridge(
                    tmp_path, "run", "--config", str(config_for(tmp_path / "other", tg, llm, url))
                )
            )
            await asyncio.wait_for(tg.holding.wait(), 30)
            # The cut: the poller's connections end and it cannot open new ones, while it polls on.
            run_sql(
                postgres.admin_url,
                f"ALTER ROLE {role} NOLOGIN; SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE usename = '{role}'",
            )
            async with asyncio.timeout(10):
                while run_sql(url, f"SELECT pid FROM pg_stat_activity WHERE usename = '{role}'"):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            assert tg.open_polls == 1  # still polling, though the polling lock is free now
            cut_at = asyncio.get_running_loop().time()
            tg.released.set()  # the other worker goes on to claim the polling lock, and gets it

            assert await asyncio.wait_for(poller.process.wait(), 15) == 1
            assert poller.said("lost the claim"), poller.lines
            await tg.wait_for(lambda: any(t > cut_at for t in tg.poll_times), timeout=30)
            tg.dm(FIRST_USER, "after the cut")
            await tg.wait_for(lambda: answered(tg, FIRST_USER, "after the cut"), timeout=30)
            assert other.process.returncode is None, other.lines
        finally:
            for worker in (poller, other):
                if worker is not None:
                    await worker.end()
    assert tg.conflicts == 0, "two workers polled at once"
