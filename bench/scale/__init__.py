"""Scale-out: `bridge run` workers in a closed loop of chats, on SQLite and on PostgreSQL.

Each worker is a real `bridge run` process. The chats come in over the fake Telegram Bot API (one
worker polls it; every worker answers), and the instant model runs in a process of its own: a turn is a
tool call, then a reply. Each chat sends its next message once the last is answered (bench/scale/loop.py),
so the figures are what the workers can take. After a warm-up, one window is measured for each store
and worker count:

- turns/s, and its ratio to one PostgreSQL worker of the same code;
- the workers' CPU per turn, and the PostgreSQL server's (its backends included), from /proc;
- p50 and p99 of a turn, from the message's arrival at the Bot API to its answer;
- from the server's statistics (pg_stat_statements, where the server has it): claims of waiting chats
  per turn, their share of the server's statement time, and transactions per turn.

`--baseline DIR` runs every count again on the `bridge` package in DIR (an older commit's: see
bench/bundle.py), back to back with this checkout's, so the two are read from one run. Also timed in a
full run: how long Telegram goes unpolled after a kill -9 of the polling worker.

`python -m bench.scale --help` for the sizes; `python -m bench --only scale` runs the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import machine, table, write_results
from bench.scale.cpu import cpu_seconds, postmaster_pid, tree_seconds
from bench.scale.loop import ClosedLoop
from bench.scale.workers import Workers, started_workers, write_config

# The tests' fake Bot API and process helpers need aiohttp alone (no pytest, no psycopg), so they import
# from a checkout with just the `bench` extra.
from devkit.fakes.telegram_api import FakeTelegram
from devkit.instant_model import instant_model
from devkit.postgres import PostgresServer, pg_bindir, postgres_server, unavailable
from devkit.processes import kill9

WORKERS = (1, 2, 4, 8)
# Answers before the warm-up's seconds begin (with thousands of chats, one each would take long).
WARM_ANSWERS = 400


@dataclass(frozen=True)
class Sizes:
    chats: int
    warm_s: float
    window_s: float
    workers: tuple[int, ...]
    sqlite: bool = True
    failover: bool = True
    baseline: Path | None = None
    # How many of the server's statements to list after each PostgreSQL window, by calls per turn.
    statements: int = 0


FULL = Sizes(chats=200, warm_s=3.0, window_s=10.0, workers=WORKERS)
SMOKE = Sizes(chats=5, warm_s=0.0, window_s=1.0, workers=(2,), failover=False)


def for_machine(sizes: Sizes) -> Sizes:
    """The worker counts the machine has cores for: each worker and its share of the server want two."""
    cpus = os.cpu_count() or 1
    fitting = tuple(w for w in sizes.workers if w == 1 or w * 2 <= cpus)
    return dataclasses.replace(sizes, workers=fitting)


# The claim statement, in every version of it: the one that locks waiting chats' rows.
_CLAIMS = "query ILIKE '%intake%' AND query ILIKE '%SKIP LOCKED%'"


class ServerStats:
    """The PostgreSQL server's counters for one database, read at the start and end of a window."""

    def __init__(self, server: PostgresServer, url: str) -> None:
        self.server = server
        self.url = url
        self.pid = postmaster_pid(server.folder / "data")
        self.statements = False

    def prepare(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            try:
                conn.execute(b"CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                self.statements = True
            except psycopg.Error:
                self.statements = False

    def read(self) -> dict[str, float | None]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                b"SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
            # Statistics are sent by each backend at its transactions' end, at most every second.
            figures: dict[str, float | None] = {"xacts": float(row[0]) if row else None}
            if self.statements:
                claims = conn.execute(
                    f"SELECT COALESCE(SUM(calls), 0), COALESCE(SUM(total_exec_time), 0) FROM "
                    f"pg_stat_statements WHERE {_CLAIMS}".encode()
                ).fetchone()
                total = conn.execute(
                    b"SELECT COALESCE(SUM(total_exec_time), 0) FROM pg_stat_statements"
                ).fetchone()
                assert claims is not None and total is not None
                figures.update(
                    claims=float(claims[0]), claim_ms=float(claims[1]), statement_ms=float(total[0])
                )
                for query, calls, ms in conn.execute(
                    b"SELECT query, calls, total_exec_time FROM pg_stat_statements"
                ):
                    figures[f"statement:{query}"] = float(calls)
                    figures[f"statement_ms:{query}"] = float(ms)
        figures["cpu"] = tree_seconds(self.pid) if self.pid else None
        return figures


def _delta(end: dict[str, float | None], start: dict[str, float | None], name: str) -> float | None:
    a, b = end.get(name), start.get(name)
    return None if a is None or b is None else a - b


def _per_turn(value: float | None, turns: int, scale: float = 1.0) -> float | None:
    return None if value is None or not turns else round(value * scale / turns, 2)


async def measure(
    model_url: str, sizes: Sizes, workers: int, *, server: PostgresServer | None, code: Path | None
) -> dict[str, Any]:
    """One window: `workers` workers on a fresh database (PostgreSQL on `server`, else SQLite)."""
    with tempfile.TemporaryDirectory(prefix="bridge-scale-") as tmp:
        folder = Path(tmp)
        stats: ServerStats | None = None
        if server is None:
            storage = f'path = "{folder / "bridge.db"}"'
        else:
            url = server.database()
            storage = f'url = "{url}"'
            stats = ServerStats(server, url)
            await asyncio.to_thread(stats.prepare)
        async with FakeTelegram() as tg:
            config = write_config(folder, tg, model_url, storage)
            async with started_workers(folder, config, workers, code=code) as running:
                loop = ClosedLoop(tg, sizes.chats)
                loop.start()
                # Enough answers that every worker's connections and lazy imports are warm.
                await loop.until_answered(min(sizes.chats, WARM_ANSWERS), 120)
                await asyncio.sleep(sizes.warm_s)
                return await _window(loop, running, stats, sizes, workers, code)


async def _window(
    loop: ClosedLoop,
    running: Workers,
    stats: ServerStats | None,
    sizes: Sizes,
    workers: int,
    code: Path | None,
) -> dict[str, Any]:
    server_start = await asyncio.to_thread(stats.read) if stats else {}
    cpu_start, driver_start = running.cpu(), cpu_seconds(os.getpid())
    window = loop.measure()
    await asyncio.sleep(sizes.window_s)
    window.ended = time.perf_counter()
    cpu_end, driver_end = running.cpu(), cpu_seconds(os.getpid())
    loop.stop()
    # The server's statistics trail its transactions by up to a second (see ServerStats.read).
    await asyncio.sleep(1.0 if stats else 0)
    server_end = await asyncio.to_thread(stats.read) if stats else {}
    turns = window.turns
    claim_ms, statement_ms = (
        _delta(server_end, server_start, "claim_ms"),
        _delta(server_end, server_start, "statement_ms"),
    )
    if sizes.statements and stats is not None:
        _print_statements(server_start, server_end, turns, sizes.statements)
    driver = (
        None if driver_start is None or driver_end is None else (driver_end - driver_start) / window.seconds
    )
    return {
        "code": "baseline" if code else "this",
        "store": "sqlite" if stats is None else "postgresql",
        "workers": workers,
        "chats": sizes.chats,
        **window.summary(),
        "worker_cpu_ms": _per_turn(
            None if cpu_start is None or cpu_end is None else cpu_end - cpu_start, turns, 1000
        ),
        "pg_cpu_ms": _per_turn(_delta(server_end, server_start, "cpu"), turns, 1000),
        # Counted to the end of the statistics' trail, a second past the window: an upper bound.
        "xacts_per_turn": _per_turn(_delta(server_end, server_start, "xacts"), turns),
        "claims_per_turn": _per_turn(_delta(server_end, server_start, "claims"), turns),
        "claim_share": None if not statement_ms or claim_ms is None else round(claim_ms / statement_ms, 3),
        # The bench process itself (the fake Bot API and the loop): near 1.0 it, not Bridge, is the limit.
        "driver_cpu": None if driver is None else round(driver, 2),
    }


def _print_statements(
    start: dict[str, float | None], end: dict[str, float | None], turns: int, count: int
) -> None:
    """The statements the window ran most, each with its calls and server time per turn."""
    rows: list[tuple[float, int, str]] = []
    for key in end:
        if key.startswith("statement:") and turns:
            query = key.removeprefix("statement:")
            # A statement first run in the window has no start figure: it counts from zero.
            calls = (end[key] or 0.0) - (start.get(key) or 0.0)
            ms = (end[f"statement_ms:{query}"] or 0.0) - (start.get(f"statement_ms:{query}") or 0.0)
            if calls:
                rows.append(
                    (round(calls / turns, 2), round(ms * 1000 / turns), " ".join(query.split())[:110])
                )
    rows.sort(key=lambda row: -row[0])
    total = round(sum(row[0] for row in rows), 2)
    print(
        table(
            f"Statements per turn ({total} in all), from pg_stat_statements",
            ["calls/turn", "server µs/turn", "statement"],
            rows[:count],
        )
    )


async def failover(model_url: str, url: str) -> float:
    """Seconds from a kill -9 of the polling worker to the next getUpdates, with two others running."""
    with tempfile.TemporaryDirectory(prefix="bridge-scale-") as tmp:
        folder = Path(tmp)
        async with FakeTelegram() as tg:
            config = write_config(folder, tg, model_url, f'url = "{url}"')
            # The first alone, so it is the one that polls; then two more, which stand by.
            async with started_workers(folder, config, 1) as poller, started_workers(folder, config, 2):
                killed_at = asyncio.get_running_loop().time()
                await kill9(poller.processes[0])
                async with asyncio.timeout(30):
                    while not any(t > killed_at for t in tg.poll_times):  # noqa: ASYNC110
                        await asyncio.sleep(0.05)
                return min(t for t in tg.poll_times if t > killed_at) - killed_at


def _with_ratios(results: list[dict[str, Any]]) -> None:
    """Each PostgreSQL row's turns/s against one PostgreSQL worker of the same code."""
    for row in results:
        one = next(
            (
                r
                for r in results
                if r["store"] == "postgresql" and r["workers"] == 1 and r["code"] == row["code"]
            ),
            None,
        )
        row["x_one"] = (
            round(row["turns_per_s"] / one["turns_per_s"], 2)
            if row["store"] == "postgresql" and one
            else None
        )


def _print(results: list[dict[str, Any]], sizes: Sizes, takeover: float | None) -> None:
    columns = [
        ("code", "code"),
        ("store", "store"),
        ("workers", "workers"),
        ("turns", "turns"),
        ("turns/s", "turns_per_s"),
        ("× 1", "x_one"),
        ("p50 ms", "p50_ms"),
        ("p99 ms", "p99_ms"),
        ("worker CPU ms/turn", "worker_cpu_ms"),
        ("PG CPU ms/turn", "pg_cpu_ms"),
        ("claims/turn", "claims_per_turn"),
        ("claim share", "claim_share"),
        ("xacts/turn", "xacts_per_turn"),
        ("driver CPU", "driver_cpu"),
    ]
    rows = [["n/a" if r.get(key) is None else r[key] for _, key in columns] for r in results]
    print(
        table(
            f"Scale-out: {sizes.chats} Telegram chats in a closed loop over the fake Bot API, a "
            f"{sizes.window_s:g} s window after a warm-up; each turn a tool call then a reply from the "
            "instant model (another process); each worker a `bridge run` process",
            [title for title, _ in columns],
            rows,
        )
    )
    if takeover is not None:
        print(f"polling again {takeover:.2f} s after a kill -9 of the polling worker (bound: 15 s)")
    print()


async def run_sizes(sizes: Sizes, *, smoke: bool = False, out: Path | None = None) -> dict[str, Any]:
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    # Workers are killed at each window's end, mid-request: the fake Bot API's server would log each
    # cut connection as an error.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    results: list[dict[str, Any]] = []
    takeover: float | None = None
    codes: list[Path | None] = [None] if sizes.baseline is None else [None, sizes.baseline]

    def save() -> dict[str, Any]:
        _with_ratios(results)
        data: dict[str, Any] = {
            "sizes": {**dataclasses.asdict(sizes), "baseline": str(sizes.baseline or "")},
            "results": results,
        }
        data["failover_s"] = None if takeover is None else round(takeover, 2)
        if out is not None:
            out.write_text(json.dumps({"benchmark": "scale", "machine": machine(), **data}, indent=2) + "\n")
        return data

    async with instant_model() as model_url:
        if sizes.sqlite:
            for code in codes:
                results.append(await measure(model_url, sizes, 1, server=None, code=code))
                save()
        if reason := unavailable():
            print(f"PostgreSQL figures skipped, SQLite only: {reason}")
        else:
            with _server() as server:
                for workers in sizes.workers:
                    # Back to back, so the baseline and this code meet the same machine's moment.
                    for code in codes:
                        results.append(await measure(model_url, sizes, workers, server=server, code=code))
                        save()
                if sizes.failover:
                    takeover = await failover(model_url, server.database())
    data = save()
    _print(results, sizes, takeover)
    write_results("scale", data, smoke=smoke)
    return data


def _server() -> contextlib.AbstractContextManager[PostgresServer]:
    """A server with pg_stat_statements loaded where it has the module, else a plain one (no claim counts)."""
    bindir = pg_bindir()
    if bindir is not None and (bindir.parent / "lib" / "pg_stat_statements.so").is_file():
        return postgres_server(settings="-c shared_preload_libraries=pg_stat_statements")
    return postgres_server()


async def run(smoke: bool = False) -> dict[str, Any]:
    # The smoke run's two workers whatever the cores: it proves they share the work, not how fast.
    return await run_sizes(SMOKE if smoke else for_machine(FULL), smoke=smoke)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=FULL.chats)
    parser.add_argument("--window", type=float, default=FULL.window_s, help="seconds measured")
    parser.add_argument("--warm", type=float, default=FULL.warm_s, help="seconds run before the window")
    parser.add_argument(
        "--workers", default=",".join(map(str, WORKERS)), help="PostgreSQL worker counts, comma-separated"
    )
    parser.add_argument(
        "--all-counts", action="store_true", help="every count, even past the machine's cores"
    )
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--no-failover", action="store_true")
    parser.add_argument(
        "--baseline", type=Path, help="a folder with an older `bridge` package, run beside this one"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here, after each window")
    parser.add_argument(
        "--statements",
        type=int,
        default=0,
        metavar="N",
        help="after each PostgreSQL window, list the N statements it ran most, per turn",
    )
    args = parser.parse_args(argv)
    sizes = Sizes(
        chats=args.chats,
        warm_s=args.warm,
        window_s=args.window,
        workers=tuple(int(w) for w in args.workers.split(",") if w),
        sqlite=not args.no_sqlite,
        failover=not args.no_failover,
        baseline=args.baseline.resolve() if args.baseline else None,
        statements=args.statements,
    )
    asyncio.run(run_sizes(sizes if args.all_counts else for_machine(sizes), out=args.json))
